// Element-wise activations: argument checks here, the math in the tensors' backend
// (backend/host/host_elementwise.cpp, or the CUDA kernels). Each element is evaluated in
// double and rounded once on both backends.

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::nn::functional {

namespace {

using tessera::detail::Activation;

Tensor map_forward(const Tensor& x, const char* fn, Activation kind) {
  detail::require_float(x, fn, "input");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::compute_for(x, fn).activation(kind, x.dtype(), x.data(), y.data(), x.numel(), x.device().index);
  return y;
}

Tensor map_backward(const Tensor& grad_y, const Tensor& x, const char* fn, Activation kind) {
  detail::require_float(x, fn, "input");
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  detail::require_same_shape(x, "input", grad_y, "grad_y", fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::compute_for(x, fn).activation_backward(kind, x.dtype(), grad_y.data(), x.data(), dx.data(), x.numel(),
                                                 x.device().index);
  return dx;
}

}  // namespace

Tensor gelu(const Tensor& x) { return map_forward(x, "gelu", Activation::gelu); }
Tensor gelu_backward(const Tensor& grad_y, const Tensor& x) {
  return map_backward(grad_y, x, "gelu_backward", Activation::gelu);
}
Tensor silu(const Tensor& x) { return map_forward(x, "silu", Activation::silu); }
Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  return map_backward(grad_y, x, "silu_backward", Activation::silu);
}

}  // namespace tessera::nn::functional
