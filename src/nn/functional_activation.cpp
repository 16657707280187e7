// Element-wise activations. Each element is evaluated in double and rounded once, so the
// f32 result is the correctly rounded f64 one (and a tensor-parallel shard computes
// bit-for-bit what the serial layer computes on the same elements).

#include <cmath>

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::nn::functional {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double gelu_value(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
double gelu_derivative(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

// Never evaluates exp of a large positive argument, so no overflow for very negative x.
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}
double silu_value(double x) { return x * sigmoid(x); }
// d/dx [x s(x)] = s(x) (1 + x (1 - s(x)))
double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

template <double (*F)(double)>
Tensor map_forward(const Tensor& x, const char* fn, tessera::detail::DeviceActivation kind) {
  detail::require_float(x, fn, "input");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).activation(kind, x.dtype(), x.data(), y.data(), x.numel(), x.device().index);
    return y;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const std::int64_t n = x.numel();
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(F(static_cast<double>(in[i])));
  });
  return y;
}

template <double (*DF)(double)>
Tensor map_backward(const Tensor& grad_y, const Tensor& x, const char* fn, tessera::detail::DeviceActivation kind) {
  detail::require_float(x, fn, "input");
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  detail::require_same_shape(x, "input", grad_y, "grad_y", fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).activation_backward(kind, x.dtype(), grad_y.data(), x.data(), dx.data(), x.numel(),
                                                   x.device().index);
    return dx;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const T* dy = grad_y.data<T>();
    T* out = dx.data<T>();
    const std::int64_t n = x.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<T>(static_cast<double>(dy[i]) * DF(static_cast<double>(in[i])));
    }
  });
  return dx;
}

}  // namespace

using tessera::detail::DeviceActivation;

Tensor gelu(const Tensor& x) { return map_forward<gelu_value>(x, "gelu", DeviceActivation::gelu); }
Tensor gelu_backward(const Tensor& grad_y, const Tensor& x) {
  return map_backward<gelu_derivative>(grad_y, x, "gelu_backward", DeviceActivation::gelu);
}
Tensor silu(const Tensor& x) { return map_forward<silu_value>(x, "silu", DeviceActivation::silu); }
Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  return map_backward<silu_derivative>(grad_y, x, "silu_backward", DeviceActivation::silu);
}

}  // namespace tessera::nn::functional
