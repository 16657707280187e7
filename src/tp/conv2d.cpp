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
AffineMath local_math(const TwinConfig<nn::Conv2d>& c) {
  nn::Conv2dOptions local = c.conv;
  if (c.halo) local.padding_h = local.padding_w = 0;
  return AffineMath::conv2d(local);
}

// The input the conv runs on: x, or x with its domain halo filled in (`channels`: x's).
Tensor haloed(const TwinConfig<nn::Conv2d>& c, const Tensor& x, std::int64_t channels, const Parameter& weight) {
  return c.halo ? c.halo->pad(x, channels, weight.value.dtype(), weight.value.device()) : x;
}

// The input gradient of the unhaloed input: the halo part goes back to its owners.
Tensor unhaloed(const TwinConfig<nn::Conv2d>& c, Tensor dx) { return c.halo ? c.halo->backward(std::move(dx)) : dx; }

// nn::Conv2d's defaults (those of nn::Linear), with the conv's fan-in C_in * kh * kw.
InitSpec default_weight_init() { return nn::Linear::default_weight_init(); }
InitSpec default_bias_init(std::int64_t in_channels, int kh, int kw) {
  return nn::Linear::default_bias_init(in_channels * kh * kw);
}

// Both rules check and build a conv's parameters alike, from its weight shape
// [C_out, C_in, kh, kw]; only the rule differs.
void make_conv_parameters(PartitionRule rule, const std::string& label, const Shape& shape,
                          const nn::Conv2dOptions& conv, Communicator& tp, const ParallelLinearOptions& o,
                          Parameter& weight, Parameter& bias) {
  const int kh = static_cast<int>(shape[2]), kw = static_cast<int>(shape[3]);
  check_geometry(label, shape[1], shape[0], kh, kw, conv, o);
  detail::make_affine_parameters(rule, label, shape, tp, o, default_weight_init(), default_bias_init(shape[1], kh, kw),
                                 weight, bias);
}

// Both rules shard a serial conv alike; only the layer type and its flag (gather_output /
// input_is_parallel) differ.
template <class Layer>
std::unique_ptr<Layer> conv_from_serial(const nn::Conv2d& serial, Communicator& tp, bool flag,
                                        const std::string& name) {
  return detail::with_serial_weights(
      std::make_unique<Layer>(serial.in_channels(), serial.out_channels(), serial.kernel_h(), serial.kernel_w(), tp,
                              serial.options(), flag, detail::options_like(serial, name)),
      serial, name);
}

}  // namespace

// The domain halo standing in for the conv's padding; it must be a "same" padding so
// every rank's output block lies on the (strided) decomposition. Collective over the
// decomposition's communicator.
std::unique_ptr<domain::ConvHalo> detail::make_conv_domain_halo(const std::string& label,
                                                                const domain::Decomposition& decomposition, int kh,
                                                                int kw, const nn::Conv2dOptions& c,
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

// ---------------------------------------------------------------------------
// ColumnParallelConv2d
// ---------------------------------------------------------------------------

ColumnParallelConv2d::ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp,
                                           bool gather_output, ParallelLinearOptions o)
    : ColumnParallelConv2d(in_channels, out_channels, 1, 1, tp, {}, gather_output, std::move(o)) {}

ColumnParallelConv2d::ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h,
                                           int kernel_w, Communicator& tp, nn::Conv2dOptions conv, bool gather_output,
                                           ParallelLinearOptions o)
    : ParallelLayer(tp, {out_channels, in_channels, kernel_h, kernel_w}, o.bias, {conv, nullptr}),
      gather_output_(gather_output) {
  name_layer(o.name);
  make_conv_parameters(PartitionRule::column, label_, master_shape_, conv, tp, o, weight, bias);
  register_parameters();
}

std::unique_ptr<ColumnParallelConv2d> ColumnParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                                        bool gather_output, const std::string& name) {
  return conv_from_serial<ColumnParallelConv2d>(serial, tp, gather_output, name);
}

Tensor ColumnParallelConv2d::forward(const Tensor& x) {
  return detail::column_forward(local_math(config_), {tp_, gather_output_, std::nullopt, compute_precision()},
                                haloed(config_, x, in_channels(), weight), weight, has_bias_ ? &bias : nullptr,
                                saved_input_);
}

Tensor ColumnParallelConv2d::backward(const Tensor& grad_y) {
  return unhaloed(config_, detail::column_backward(local_math(config_),
                                                   {tp_, gather_output_, std::nullopt, compute_precision()}, grad_y,
                                                   weight, has_bias_ ? &bias : nullptr, saved_input_, label_));
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
    : ParallelLayer(tp, {out_channels, in_channels, kernel_h, kernel_w}, o.bias, {conv, nullptr}),
      input_is_parallel_(input_is_parallel) {
  name_layer(o.name);
  make_conv_parameters(PartitionRule::row, label_, master_shape_, conv, tp, o, weight, bias);
  register_parameters();
}

std::unique_ptr<RowParallelConv2d> RowParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                                  bool input_is_parallel, const std::string& name) {
  return conv_from_serial<RowParallelConv2d>(serial, tp, input_is_parallel, name);
}

Tensor RowParallelConv2d::forward(const Tensor& x) {
  // The input as given: this rank's channel shard, or all channels (split after the halo).
  const std::int64_t channels = input_is_parallel_ ? weight.value.size(1) : in_channels();
  return detail::row_forward(local_math(config_), {tp_, input_is_parallel_, std::nullopt, compute_precision()},
                             haloed(config_, x, channels, weight), weight, has_bias_ ? &bias : nullptr, saved_input_);
}

Tensor RowParallelConv2d::backward(const Tensor& grad_y) {
  return unhaloed(config_, detail::row_backward(local_math(config_),
                                                {tp_, input_is_parallel_, std::nullopt, compute_precision()}, grad_y,
                                                weight, has_bias_ ? &bias : nullptr, saved_input_, label_));
}

}  // namespace tessera::tp
