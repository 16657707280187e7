#include "tessera/nn/linear.hpp"

#include <cmath>

#include "tessera/nn/functional.hpp"

namespace tessera::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias, DType dtype, Device device)
    : in_features_(in_features), out_features_(out_features) {
  if (in_features < 1 || out_features < 1) {
    throw InvalidArgument("Linear: in_features " + std::to_string(in_features) + " and out_features " +
                          std::to_string(out_features) + " must both be >= 1");
  }
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw InvalidArgument(describe() + ": dtype " + std::string(dtype_name(dtype)) + " is not supported (f32, f64)");
  }
  weight = Parameter(Tensor::zeros({out_features, in_features}, dtype, device), default_weight_init());
  register_parameter("weight", weight);
  if (with_bias) {
    bias = Parameter(Tensor::zeros({out_features}, dtype, device), default_bias_init(in_features));
    register_parameter("bias", bias);
  }
}

InitSpec Linear::default_weight_init() { return InitSpec::kaiming_uniform(std::sqrt(5.0)); }

InitSpec Linear::default_bias_init(std::int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return InitSpec::uniform(-bound, bound);
}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.value.defined() ? "true" : "false") + ")";
}

Tensor Linear::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  if (input.dim() < 1 || input.size(input.dim() - 1) != in_features_) {
    throw ShapeError(describe() + ": input " + input.str() + " must have last dim " + std::to_string(in_features_));
  }
  if (input.dtype() != weight.value.dtype()) {
    throw ShapeError(describe() + ": input " + input.str() + " does not match the dtype of weight " +
                     weight.value.str());
  }
  // The input itself, in either precision: a bf16 copy kept here would be one more copy
  // per consumer of a tensor that q, k and v (or gate and up) share, more memory than the
  // one f32 tensor they alias. bf16-mixed rounds it again in backward (one pass).
  input_ = input.contiguous();
  return functional::linear(input_, weight.value, bias.value, compute_precision());
}

Tensor Linear::backward(const Tensor& grad_output) {
  if (!input_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor dx = functional::linear_backward(grad_output.contiguous(), input_, weight.value, weight.grad, bias.grad,
                                          compute_precision());
  input_ = Tensor();
  return dx;
}

}  // namespace tessera::nn
