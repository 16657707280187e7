#include "tessera/nn/swiglu.hpp"

#include <cmath>

#include "functional_support.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn {

namespace functional {

namespace {

// Never evaluates exp of a large positive argument, so no overflow for very negative x.
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

void check_pair(const Tensor& gate, const Tensor& up, const char* fn) {
  detail::require_float(gate, fn, "gate");
  detail::require_float(up, fn, "up");
  detail::require_same_dtype(gate, "gate", up, "up", fn);
  detail::require_same_shape(gate, "gate", up, "up", fn);
}

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_pair(gate, up, "swiglu");
  Tensor y = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (detail::on_cuda(gate)) {
    detail::compute_for(gate, "swiglu").swiglu(gate.dtype(), gate.data(), up.data(), y.data(), gate.numel(),
                                               gate.device().index);
    return y;
  }
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    T* out = y.data<T>();
    const std::int64_t n = gate.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]);
      out[i] = static_cast<T>(gi * sigmoid(gi) * static_cast<double>(u[i]));
    }
  });
  return y;
}

SwiGluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up) {
  const char* fn = "swiglu_backward";
  check_pair(gate, up, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(gate, "gate", grad_y, "grad_y", fn);
  detail::require_same_shape(gate, "gate", grad_y, "grad_y", fn);
  SwiGluGrads grads{Tensor::empty(gate.shape(), gate.dtype(), gate.device()),
                    Tensor::empty(gate.shape(), gate.dtype(), gate.device())};
  if (detail::on_cuda(gate)) {
    detail::compute_for(gate, fn).swiglu_backward(gate.dtype(), grad_y.data(), gate.data(), up.data(),
                                                  grads.gate.data(), grads.up.data(), gate.numel(),
                                                  gate.device().index);
    return grads;
  }
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    const T* dy = grad_y.data<T>();
    T* dg = grads.gate.data<T>();
    T* du = grads.up.data<T>();
    const std::int64_t n = gate.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]);
      const double s = sigmoid(gi);
      const double d = static_cast<double>(dy[i]);
      // d silu(g)/dg = s (1 + g (1 - s))
      dg[i] = static_cast<T>(d * static_cast<double>(u[i]) * s * (1.0 + gi * (1.0 - s)));
      du[i] = static_cast<T>(d * gi * s);
    }
  });
  return grads;
}

}  // namespace functional

SwiGLU::SwiGLU(std::int64_t d_model, std::int64_t hidden, DType dtype, Device device)
    : d_model_(d_model), hidden_(hidden) {
  if (d_model < 1 || hidden < 1) throw InvalidArgument(describe() + ": d_model and hidden must both be >= 1");
  register_child("gate", std::make_unique<Linear>(d_model, hidden, /*bias=*/false, dtype, device));
  register_child("up", std::make_unique<Linear>(d_model, hidden, /*bias=*/false, dtype, device));
  register_child("down", std::make_unique<Linear>(hidden, d_model, /*bias=*/false, dtype, device));
}

std::string SwiGLU::describe() const {
  return "SwiGLU(d_model=" + std::to_string(d_model_) + ", hidden=" + std::to_string(hidden_) + ")";
}

Tensor SwiGLU::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  // Through at() every time: parallelize may have replaced any projection.
  Tensor gate = at("gate").forward(input).contiguous();
  Tensor up = at("up").forward(input).contiguous();
  if (gate.shape() != up.shape()) {
    throw ShapeError(describe() + ": gate output " + gate.str() + " and up output " + up.str() +
                     " must have one shape");
  }
  Tensor y = at("down").forward(functional::swiglu(gate, up));
  gate_ = std::move(gate);
  up_ = std::move(up);
  return y;
}

Tensor SwiGLU::backward(const Tensor& grad_output) {
  if (!gate_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor grad_hidden = at("down").backward(grad_output).contiguous();
  functional::SwiGluGrads g = functional::swiglu_backward(grad_hidden, gate_, up_);
  gate_ = up_ = Tensor();
  Tensor dgate = at("gate").backward(g.gate);
  Tensor dup = at("up").backward(g.up);
  if (dgate.shape() != dup.shape()) {
    throw ShapeError(describe() + ": input gradients of gate " + dgate.str() + " and up " + dup.str() +
                     " must have one shape");
  }
  // A fresh tensor: a child's returned gradient may alias storage it still uses.
  Tensor dx = dgate.clone();
  ops::axpy(1.0, dup.contiguous(), dx);
  return dx;
}

}  // namespace tessera::nn
