#include "tessera/tp/conv2d.hpp"

#include <utility>

#include "tessera/nn/functional.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/parallel_affine.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

using detail::AffineMath;
using detail::PartitionRule;

std::string pair_str(int a, int b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

void check_geometry(const std::string& label, std::int64_t in, std::int64_t out, int kh, int kw,
                    const nn::Conv2dOptions& c, const ParallelLinearOptions& o) {
  if (o.sequence_dim) {
    throw InvalidArgument(label + ": sequence parallelism (options.sequence_dim) applies to Linear layers, not to a "
                          "Conv2d on NCHW fields");
  }
  if (in < 1 || out < 1 || kh < 1 || kw < 1) {
    throw InvalidArgument(label + ": in_channels " + std::to_string(in) + ", out_channels " + std::to_string(out) +
                          " and kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " must be >= 1");
  }
  if (c.stride_h < 1 || c.stride_w < 1 || c.dilation_h < 1 || c.dilation_w < 1 || c.padding_h < 0 ||
      c.padding_w < 0) {
    throw InvalidArgument(label + ": stride " + pair_str(c.stride_h, c.stride_w) + " and dilation " +
                          pair_str(c.dilation_h, c.dilation_w) + " must be >= 1 and padding " +
                          pair_str(c.padding_h, c.padding_w) + " >= 0");
  }
}

// The conv each rank runs on its channels: the layer's own, or, on a haloed block (the
// halo is the padding), the same without padding.
AffineMath local_math(const nn::Conv2dOptions& conv, bool haloed) {
  nn::Conv2dOptions local = conv;
  if (haloed) local.padding_h = local.padding_w = 0;
  return AffineMath::conv2d(local);
}

// The domain halo standing in for the conv's padding; it must be a "same" padding so
// every rank's output block lies on the (strided) decomposition. Collective over the
// decomposition's communicator.
std::unique_ptr<domain::ConvHalo> make_halo(const std::string& label, const domain::Decomposition& decomposition,
                                            int kh, int kw, const nn::Conv2dOptions& c,
                                            const domain::ConvHaloOptions& options) {
  const bool same_h = 2 * c.padding_h == c.dilation_h * (kh - 1), same_w = 2 * c.padding_w == c.dilation_w * (kw - 1);
  if (!same_h || !same_w) {
    throw InvalidArgument(label + ": with a domain halo the padding must be the 'same' padding, 2 * padding = "
                          "dilation * (kernel - 1) on each axis, so output blocks tile the output grid; kernel " +
                          std::to_string(kh) + "x" + std::to_string(kw) + " with dilation " +
                          pair_str(c.dilation_h, c.dilation_w) + " has padding " + pair_str(c.padding_h, c.padding_w) +
                          (((c.dilation_h * (kh - 1)) % 2 != 0 || (c.dilation_w * (kw - 1)) % 2 != 0)
                               ? " (an even dilated kernel extent has no symmetric 'same' padding: use "
                                 "domain::DomainConv2d, which splits it unevenly)"
                               : ""));
  }
  return std::make_unique<domain::ConvHalo>(decomposition,
                                            domain::HaloWidths{c.padding_h, c.padding_h, c.padding_w, c.padding_w},
                                            options, label, c.stride_h, c.stride_w);
}

std::unique_ptr<nn::Conv2d> serial_with(const Tensor& weight, const Tensor& bias, const Parameter& w,
                                        const Parameter& b, bool has_bias, const nn::Conv2dOptions& conv) {
  auto serial = std::make_unique<nn::Conv2d>(weight.size(1), weight.size(0), static_cast<int>(weight.size(2)),
                                             static_cast<int>(weight.size(3)), conv, has_bias, weight.dtype(),
                                             weight.device());
  detail::copy_master(serial->weight, weight, w);
  if (has_bias) detail::copy_master(serial->bias, bias, b);
  return serial;
}

// nn::Conv2d's defaults (those of nn::Linear), with the conv's fan-in C_in * kh * kw.
InitSpec default_weight_init() { return nn::Linear::default_weight_init(); }
InitSpec default_bias_init(std::int64_t in_channels, int kh, int kw) {
  return nn::Linear::default_bias_init(in_channels * kh * kw);
}

}  // namespace

// ---------------------------------------------------------------------------
// ColumnParallelConv2d
// ---------------------------------------------------------------------------

ColumnParallelConv2d::ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp,
                                           bool gather_output, ParallelLinearOptions o)
    : ColumnParallelConv2d(in_channels, out_channels, 1, 1, tp, {}, gather_output, std::move(o)) {}

ColumnParallelConv2d::ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h,
                                           int kernel_w, Communicator& tp, nn::Conv2dOptions conv, bool gather_output,
                                           ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), kernel_h_(kernel_h), kernel_w_(kernel_w), conv_(conv), tp_(tp),
      gather_output_(gather_output), has_bias_(o.bias), label_(detail::layer_label(type_name(), o.name)) {
  check_geometry(label_, in_, out_, kernel_h_, kernel_w_, conv_, o);
  detail::make_affine_parameters(PartitionRule::column, label_, {out_, in_, kernel_h_, kernel_w_}, tp, o,
                                 default_weight_init(), default_bias_init(in_, kernel_h_, kernel_w_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<ColumnParallelConv2d> ColumnParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                                        bool gather_output, const std::string& name) {
  return detail::with_serial_weights(
      std::make_unique<ColumnParallelConv2d>(serial.in_channels(), serial.out_channels(), serial.kernel_h(),
                                             serial.kernel_w(), tp, serial.options(), gather_output,
                                             detail::options_like(serial, name)),
      serial, name);
}

std::unique_ptr<nn::Conv2d> ColumnParallelConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_, conv_);
}

void ColumnParallelConv2d::use_domain_halo(const domain::Decomposition& decomposition,
                                           domain::ConvHaloOptions options) {
  halo_ = make_halo(label_, decomposition, kernel_h_, kernel_w_, conv_, options);
}

Tensor ColumnParallelConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor ColumnParallelConv2d::master_bias() { return has_bias_ ? assemble_master(bias, bias.value, tp_) : Tensor(); }

Tensor ColumnParallelConv2d::forward(const Tensor& x) {
  const Tensor input = halo_ ? halo_->pad(x, in_, weight.value.dtype(), weight.value.device()) : x;
  return detail::column_forward(local_math(conv_, halo_ != nullptr), {tp_, gather_output_, std::nullopt, compute_precision()}, input,
                                weight, has_bias_ ? &bias : nullptr, input_);
}

Tensor ColumnParallelConv2d::backward(const Tensor& grad_y) {
  Tensor dx = detail::column_backward(local_math(conv_, halo_ != nullptr), {tp_, gather_output_, std::nullopt, compute_precision()},
                                      grad_y, weight, has_bias_ ? &bias : nullptr, input_, label_);
  return halo_ ? halo_->backward(std::move(dx)) : dx;
}

// ---------------------------------------------------------------------------
// RowParallelConv2d
// ---------------------------------------------------------------------------

RowParallelConv2d::RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp,
                                     bool input_is_parallel, ParallelLinearOptions o)
    : RowParallelConv2d(in_channels, out_channels, 1, 1, tp, {}, input_is_parallel, std::move(o)) {}

RowParallelConv2d::RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h, int kernel_w,
                                     Communicator& tp, nn::Conv2dOptions conv, bool input_is_parallel,
                                     ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), kernel_h_(kernel_h), kernel_w_(kernel_w), conv_(conv), tp_(tp),
      input_is_parallel_(input_is_parallel), has_bias_(o.bias), label_(detail::layer_label(type_name(), o.name)) {
  check_geometry(label_, in_, out_, kernel_h_, kernel_w_, conv_, o);
  detail::make_affine_parameters(PartitionRule::row, label_, {out_, in_, kernel_h_, kernel_w_}, tp, o,
                                 default_weight_init(), default_bias_init(in_, kernel_h_, kernel_w_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<RowParallelConv2d> RowParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                                  bool input_is_parallel, const std::string& name) {
  return detail::with_serial_weights(
      std::make_unique<RowParallelConv2d>(serial.in_channels(), serial.out_channels(), serial.kernel_h(),
                                          serial.kernel_w(), tp, serial.options(), input_is_parallel,
                                          detail::options_like(serial, name)),
      serial, name);
}

std::unique_ptr<nn::Conv2d> RowParallelConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_, conv_);
}

void RowParallelConv2d::use_domain_halo(const domain::Decomposition& decomposition, domain::ConvHaloOptions options) {
  halo_ = make_halo(label_, decomposition, kernel_h_, kernel_w_, conv_, options);
}

Tensor RowParallelConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor RowParallelConv2d::master_bias() { return has_bias_ ? bias.value.clone() : Tensor(); }

Tensor RowParallelConv2d::forward(const Tensor& x) {
  // The input as given: this rank's channel shard, or all channels (split after the halo).
  const std::int64_t channels = input_is_parallel_ ? weight.value.size(1) : in_;
  const Tensor input = halo_ ? halo_->pad(x, channels, weight.value.dtype(), weight.value.device()) : x;
  return detail::row_forward(local_math(conv_, halo_ != nullptr), {tp_, input_is_parallel_, std::nullopt, compute_precision()}, input,
                             weight, has_bias_ ? &bias : nullptr, input_local_);
}

Tensor RowParallelConv2d::backward(const Tensor& grad_y) {
  Tensor dx = detail::row_backward(local_math(conv_, halo_ != nullptr), {tp_, input_is_parallel_, std::nullopt, compute_precision()},
                                   grad_y, weight, has_bias_ ? &bias : nullptr, input_local_, label_);
  return halo_ ? halo_->backward(std::move(dx)) : dx;
}

}  // namespace tessera::tp
