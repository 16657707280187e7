#include "tessera/nn/norm.hpp"

#include <cmath>
#include <sstream>

#include "tessera/nn/functional.hpp"

namespace tessera::nn {

namespace {

std::string eps_str(double eps) {
  std::ostringstream out;
  out << eps;
  return out.str();
}

void check_config(const std::string& layer, std::int64_t size, double eps, DType dtype) {
  if (size < 1) throw InvalidArgument(layer + ": normalized size must be >= 1");
  if (!(eps >= 0.0) || !std::isfinite(eps)) throw InvalidArgument(layer + ": eps must be finite and >= 0");
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw InvalidArgument(layer + ": dtype " + std::string(dtype_name(dtype)) + " is not supported (f32, f64)");
  }
}

void check_input(const std::string& layer, const Tensor& input, std::int64_t size, DType dtype) {
  if (!input.defined()) throw InvalidArgument(layer + ": forward input is undefined");
  if (input.dim() < 1 || input.size(input.dim() - 1) != size) {
    throw ShapeError(layer + ": input " + input.str() + " must have last dim " + std::to_string(size));
  }
  if (input.dtype() != dtype) {
    throw ShapeError(layer + ": input " + input.str() + " must be " + std::string(dtype_name(dtype)) +
                     ", the layer's dtype");
  }
}

void check_backward(const std::string& layer, const Tensor& cached, const Tensor& grad_output) {
  if (!cached.defined()) throw InvalidArgument(layer + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(layer + ": backward grad_output is undefined");
}

}  // namespace

LayerNorm::LayerNorm(std::int64_t normalized_size, double eps, bool affine, DType dtype, Device device)
    : size_(normalized_size), eps_(eps), dtype_(dtype) {
  check_config(describe(), normalized_size, eps, dtype);
  if (affine) {
    weight = Parameter(Tensor::zeros({normalized_size}, dtype, device), InitSpec::ones());
    bias = Parameter(Tensor::zeros({normalized_size}, dtype, device), InitSpec::zeros());
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

std::string LayerNorm::describe() const {
  return "LayerNorm(" + std::to_string(size_) + ", eps=" + eps_str(eps_) +
         ", affine=" + (weight.value.defined() ? "true" : "false") + ")";
}

Tensor LayerNorm::forward(const Tensor& input) {
  check_input(describe(), input, size_, dtype_);
  input_ = input.contiguous();
  return functional::layer_norm(input_, weight.value, bias.value, eps_, mean_, rstd_);
}

Tensor LayerNorm::backward(const Tensor& grad_output) {
  check_backward(describe(), input_, grad_output);
  Tensor dx = functional::layer_norm_backward(grad_output.contiguous(), input_, weight.value, mean_, rstd_,
                                              weight.grad, bias.grad);
  input_ = mean_ = rstd_ = Tensor();
  return dx;
}

RMSNorm::RMSNorm(std::int64_t size, double eps, DType dtype, Device device) : size_(size), eps_(eps) {
  check_config(describe(), size, eps, dtype);
  weight = Parameter(Tensor::zeros({size}, dtype, device), InitSpec::ones());
  register_parameter("weight", weight);
}

std::string RMSNorm::describe() const { return "RMSNorm(" + std::to_string(size_) + ", eps=" + eps_str(eps_) + ")"; }

Tensor RMSNorm::forward(const Tensor& input) {
  check_input(describe(), input, size_, weight.value.dtype());
  input_ = input.contiguous();
  return functional::rms_norm(input_, weight.value, eps_, rstd_);
}

Tensor RMSNorm::backward(const Tensor& grad_output) {
  check_backward(describe(), input_, grad_output);
  Tensor dx = functional::rms_norm_backward(grad_output.contiguous(), input_, weight.value, rstd_, weight.grad);
  input_ = rstd_ = Tensor();
  return dx;
}

}  // namespace tessera::nn
