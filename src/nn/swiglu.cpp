#include "tessera/nn/swiglu.hpp"

#include "functional_support.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn {

namespace functional {

namespace {

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
  detail::compute_for(gate, "swiglu").swiglu(gate.dtype(), gate.data(), up.data(), y.data(), gate.numel(),
                                             gate.device().index);
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
  detail::compute_for(gate, fn).swiglu_backward(gate.dtype(), grad_y.data(), gate.data(), up.data(),
                                                grads.gate.data(), grads.up.data(), gate.numel(),
                                                gate.device().index);
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
