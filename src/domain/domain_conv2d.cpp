#include "tessera/domain/domain_conv2d.hpp"

#include <cmath>

#include "tessera/agree.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::domain {

HaloWidths same_conv_halo(int kernel_h, int kernel_w, int dilation_h, int dilation_w) {
  const int total_h = dilation_h * (kernel_h - 1), total_w = dilation_w * (kernel_w - 1);
  return {total_h / 2, total_h - total_h / 2, total_w / 2, total_w - total_w / 2};
}

namespace {

std::string conv_name(std::int64_t in, std::int64_t out, int kh, int kw, const DomainConv2dOptions& o) {
  return "DomainConv2d(" + std::to_string(in) + ", " + std::to_string(out) + ", kernel=" + std::to_string(kh) + "x" +
         std::to_string(kw) + ", dilation=" + std::to_string(o.dilation_h) + "x" + std::to_string(o.dilation_w) +
         ", lon padding=" + (o.lon_padding == LonPadding::periodic ? "periodic" : "zero") +
         ", pole=" + std::string(pole_policy_name(o.pole)) + ", bias=" + (o.bias ? "true" : "false") + ")";
}

// Checked before the halo plan is built, so its errors name the layer.
HaloSpec conv_halo_spec(std::int64_t in, std::int64_t out, int kh, int kw, const DomainConv2dOptions& o) {
  if (in < 1 || out < 1 || kh < 1 || kw < 1 || o.dilation_h < 1 || o.dilation_w < 1) {
    throw InvalidArgument(conv_name(in, out, kh, kw, o) + ": channels, kernel sizes and dilations must be >= 1");
  }
  if (o.dtype != DType::f32 && o.dtype != DType::f64) {
    throw InvalidArgument(conv_name(in, out, kh, kw, o) + ": dtype " + std::string(dtype_name(o.dtype)) +
                          " is not supported (f32, f64)");
  }
  return {same_conv_halo(kh, kw, o.dilation_h, o.dilation_w), o.lon_padding == LonPadding::periodic, o.pole};
}

}  // namespace

DomainConv2d::DomainConv2d(const Decomposition& decomposition, std::int64_t in_channels, std::int64_t out_channels,
                           int kernel_h, int kernel_w, DomainConv2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      options_(options),
      halo_(decomposition, conv_halo_spec(in_channels, out_channels, kernel_h, kernel_w, options)) {
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
  const Decomposition& d = halo_.decomposition();
  auto validate = [&] {
    const LocalBox box = d.box();
    if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
    if (input.dim() != 4 || input.size(1) != in_channels_ || input.size(2) != box.lat.length ||
        input.size(3) != box.lon.length || input.dtype() != weight.value.dtype() ||
        !(input.device() == weight.value.device())) {
      throw ShapeError(describe() + ": input " + input.str() + " on domain rank " + std::to_string(d.rank()) +
                       " must be " + std::string(dtype_name(weight.value.dtype())) + "[N, " +
                       std::to_string(in_channels_) + ", " + std::to_string(box.lat.length) + ", " +
                       std::to_string(box.lon.length) + "] on " + weight.value.device().str() + " (" + box.str() +
                       ")");
    }
  };
  // A shape that is wrong on one rank only (uneven splits make that easy) must throw on
  // every rank, not strand the others in the exchange: agree whenever the shape changes.
  if (!input.defined() || input.shape() != agreed_input_shape_) {
    agree_on_success(d.comm().mpi_comm(), validate);
    agreed_input_shape_ = input.shape();
  }
  validate();
  Tensor padded = halo_.allocate(input.dtype(), {input.size(0), in_channels_}, input.device());
  halo_.interior(padded).copy_from(input);
  halo_.exchange(padded);
  padded_input_ = padded;
  return nn::functional::conv2d(padded, weight.value, bias.value, local_options(options_));
}

Tensor DomainConv2d::backward(const Tensor& grad_output) {
  if (!padded_input_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor grad_padded = nn::functional::conv2d_backward(grad_output.contiguous(), padded_input_, weight.value,
                                                       weight.grad, bias.grad, local_options(options_));
  padded_input_ = Tensor();
  halo_.exchange_adjoint(grad_padded);
  return halo_.interior(grad_padded).contiguous();
}

}  // namespace tessera::domain
