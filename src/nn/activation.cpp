#include "tessera/nn/activation.hpp"

#include "tessera/nn/functional.hpp"

namespace tessera::nn {

namespace {

void check_forward_input(const Tensor& input, const std::string& layer) {
  if (!input.defined()) throw InvalidArgument(layer + ": forward input is undefined");
  if (input.dtype() != DType::f32 && input.dtype() != DType::f64) {
    throw ShapeError(layer + ": input " + input.str() + " must be f32 or f64");
  }
}

void check_backward_args(const Tensor& cached, const Tensor& grad_output, const std::string& layer) {
  if (!cached.defined()) throw InvalidArgument(layer + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(layer + ": backward grad_output is undefined");
  if (grad_output.shape() != cached.shape()) {
    throw ShapeError(layer + ": grad_output " + grad_output.str() + " must have the shape of the forward input " +
                     cached.str());
  }
}

}  // namespace

Tensor GELU::forward(const Tensor& input) {
  check_forward_input(input, type_name());
  input_ = input.contiguous();
  return functional::gelu(input_);
}

Tensor GELU::backward(const Tensor& grad_output) {
  check_backward_args(input_, grad_output, type_name());
  Tensor dx = functional::gelu_backward(grad_output.contiguous(), input_);
  input_ = Tensor();
  return dx;
}

Tensor SiLU::forward(const Tensor& input) {
  check_forward_input(input, type_name());
  input_ = input.contiguous();
  return functional::silu(input_);
}

Tensor SiLU::backward(const Tensor& grad_output) {
  check_backward_args(input_, grad_output, type_name());
  Tensor dx = functional::silu_backward(grad_output.contiguous(), input_);
  input_ = Tensor();
  return dx;
}

}  // namespace tessera::nn
