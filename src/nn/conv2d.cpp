#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"

#include <cmath>

namespace tessera::nn {

namespace {
std::string pair_str(int a, int b) { return std::to_string(a) + "x" + std::to_string(b); }
}  // namespace

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h, int kernel_w,
               Conv2dOptions options, bool with_bias, DType dtype, Device device, int groups)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      options_(options) {
  if (groups != 1) {
    throw InvalidArgument(describe() + ": groups = " + std::to_string(groups) +
                          " is not supported (only groups = 1)");
  }
  if (in_channels < 1 || out_channels < 1 || kernel_h < 1 || kernel_w < 1) {
    throw InvalidArgument(describe() + ": channels and kernel sizes must be >= 1");
  }
  if (options.stride_h < 1 || options.stride_w < 1 || options.dilation_h < 1 || options.dilation_w < 1 ||
      options.padding_h < 0 || options.padding_w < 0) {
    throw InvalidArgument(describe() + ": stride and dilation must be >= 1 and padding >= 0");
  }
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw InvalidArgument(describe() + ": dtype " + std::string(dtype_name(dtype)) + " is not supported (f32, f64)");
  }
  weight = Parameter(Tensor::zeros({out_channels, in_channels, kernel_h, kernel_w}, dtype, device),
                     Linear::default_weight_init());
  register_parameter("weight", weight);
  if (with_bias) {
    bias = Parameter(Tensor::zeros({out_channels}, dtype, device),
                     Linear::default_bias_init(in_channels * kernel_h * kernel_w));
    register_parameter("bias", bias);
  }
}

std::string Conv2d::describe() const {
  std::string s = "Conv2d(" + std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel=" + pair_str(kernel_h_, kernel_w_);
  if (!options_.is_default()) {
    s += ", stride=" + pair_str(options_.stride_h, options_.stride_w) +
         ", padding=" + pair_str(options_.padding_h, options_.padding_w) +
         ", dilation=" + pair_str(options_.dilation_h, options_.dilation_w);
  }
  return s + ", bias=" + (bias.value.defined() ? "true" : "false") + ")";
}

Tensor Conv2d::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  if (input.dim() != 4 || input.size(1) != in_channels_) {
    throw ShapeError(describe() + ": input " + input.str() + " must be [N, " + std::to_string(in_channels_) +
                     ", H, W]");
  }
  if (input.dtype() != weight.value.dtype()) {
    throw ShapeError(describe() + ": input " + input.str() + " does not match the dtype of weight " +
                     weight.value.str());
  }
  const std::int64_t span_h = static_cast<std::int64_t>(options_.dilation_h) * (kernel_h_ - 1) + 1;
  const std::int64_t span_w = static_cast<std::int64_t>(options_.dilation_w) * (kernel_w_ - 1) + 1;
  if (input.size(2) + 2 * options_.padding_h < span_h || input.size(3) + 2 * options_.padding_w < span_w) {
    throw ShapeError(describe() + ": input " + input.str() + " is smaller than the (dilated) kernel extent " +
                     pair_str(static_cast<int>(span_h), static_cast<int>(span_w)) + " after padding");
  }
  input_ = input.contiguous();
  return functional::conv2d(input_, weight.value, bias.value, options_, compute_precision());
}

Tensor Conv2d::backward(const Tensor& grad_output) {
  if (!input_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor dx = functional::conv2d_backward(grad_output.contiguous(), input_, weight.value, weight.grad, bias.grad,
                                          options_, compute_precision());
  input_ = Tensor();
  return dx;
}

}  // namespace tessera::nn
