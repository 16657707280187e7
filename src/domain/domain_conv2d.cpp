#include "tessera/domain/domain_conv2d.hpp"

#include <cmath>

#include "tessera/nn/functional.hpp"

namespace tessera::domain {

namespace {

std::string conv_name(std::int64_t in, std::int64_t out, int kh, int kw, const DomainConv2dOptions& o) {
  return "DomainConv2d(" + std::to_string(in) + ", " + std::to_string(out) + ", kernel=" + std::to_string(kh) + "x" +
         std::to_string(kw) + ", dilation=" + std::to_string(o.dilation_h) + "x" + std::to_string(o.dilation_w) +
         ", lon padding=" + (o.lon_padding == LonPadding::periodic ? "periodic" : "zero") +
         ", pole=" + std::string(pole_policy_name(o.pole)) +
         (o.north != EdgePolicy::from_spec ? ", north=" + std::string(edge_policy_name(o.north)) : std::string()) +
         (o.south != EdgePolicy::from_spec ? ", south=" + std::string(edge_policy_name(o.south)) : std::string()) +
         ", bias=" + (o.bias ? "true" : "false") + ")";
}

// Checked before the halo plan is built, so its errors name the layer.
HaloWidths conv_halo_width(std::int64_t in, std::int64_t out, int kh, int kw, const DomainConv2dOptions& o) {
  if (in < 1 || out < 1 || kh < 1 || kw < 1 || o.dilation_h < 1 || o.dilation_w < 1) {
    throw InvalidArgument(conv_name(in, out, kh, kw, o) + ": channels, kernel sizes and dilations must be >= 1");
  }
  if (o.dtype != DType::f32 && o.dtype != DType::f64) {
    throw InvalidArgument(conv_name(in, out, kh, kw, o) + ": dtype " + std::string(dtype_name(o.dtype)) +
                          " is not supported (f32, f64)");
  }
  return same_conv_halo(kh, kw, o.dilation_h, o.dilation_w);
}

}  // namespace

DomainConv2d::DomainConv2d(const Decomposition& decomposition, std::int64_t in_channels, std::int64_t out_channels,
                           int kernel_h, int kernel_w, DomainConv2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      options_(options),
      halo_(decomposition, conv_halo_width(in_channels, out_channels, kernel_h, kernel_w, options),
            {options.lon_padding, options.pole, options.north, options.south}, conv_name(in_channels, out_channels, kernel_h, kernel_w, options)) {
  // nn::Conv2d's parameters and initialisation, replicated over the domain.
  weight = Parameter(Tensor::zeros({out_channels, in_channels, kernel_h, kernel_w}, options.dtype, options.device),
                     InitSpec::kaiming_uniform(std::sqrt(5.0)));
  register_parameter("weight", weight);
  if (options.bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels) * kernel_h * kernel_w);
    bias = Parameter(Tensor::zeros({out_channels}, options.dtype, options.device), InitSpec::uniform(-bound, bound));
    register_parameter("bias", bias);
  }
}

std::string DomainConv2d::describe() const {
  return conv_name(in_channels_, out_channels_, kernel_h_, kernel_w_, options_);
}

static nn::functional::Conv2dOptions local_options(const DomainConv2dOptions& o) {
  nn::functional::Conv2dOptions c;
  c.dilation_h = o.dilation_h;
  c.dilation_w = o.dilation_w;
  return c;  // no padding: the halo is the padding
}

Tensor DomainConv2d::forward(const Tensor& input) {
  padded_input_ = halo_.pad(input, in_channels_, weight.value.dtype(), weight.value.device());
  return nn::functional::conv2d(padded_input_, weight.value, bias.value, local_options(options_),
                                compute_precision());
}

Tensor DomainConv2d::backward(const Tensor& grad_output) {
  if (!padded_input_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor grad_padded = nn::functional::conv2d_backward(grad_output.contiguous(), padded_input_, weight.value,
                                                       weight.grad, bias.grad, local_options(options_),
                                                       compute_precision());
  padded_input_ = Tensor();
  return halo_.backward(std::move(grad_padded));
}

}  // namespace tessera::domain
