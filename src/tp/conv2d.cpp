#include "tessera/tp/conv2d.hpp"

#include "tessera/nn/functional.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/parallel_affine.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

using detail::AffineMath;
using detail::PartitionRule;

void check_channels(const std::string& label, std::int64_t in, std::int64_t out, const ParallelLinearOptions& o) {
  if (o.sequence_dim) {
    throw InvalidArgument(label + ": sequence parallelism (options.sequence_dim) applies to Linear layers, not to a "
                          "1x1 Conv2d on NCHW fields");
  }
  if (in < 1 || out < 1) {
    throw InvalidArgument(label + ": in_channels " + std::to_string(in) + " and out_channels " + std::to_string(out) +
                          " must be >= 1");
  }
}

std::unique_ptr<nn::Conv2d> serial_with(const Tensor& weight, const Tensor& bias, const Parameter& w,
                                        const Parameter& b, bool has_bias) {
  auto serial = std::make_unique<nn::Conv2d>(weight.size(1), weight.size(0), 1, 1, nn::functional::Conv2dOptions{},
                                             has_bias, weight.dtype(), weight.device());
  detail::copy_master(serial->weight, weight, w);
  if (has_bias) detail::copy_master(serial->bias, bias, b);
  return serial;
}

// nn::Conv2d's defaults (those of nn::Linear), with the 1x1 conv's fan-in C_in.
InitSpec default_weight_init() { return nn::Linear::default_weight_init(); }
InitSpec default_bias_init(std::int64_t in_channels) { return nn::Linear::default_bias_init(in_channels); }

}  // namespace

void require_plain_1x1(const nn::Conv2d& conv, const std::string& layer) {
  const bool plain = conv.kernel_h() == 1 && conv.kernel_w() == 1 && conv.options().is_default() && conv.groups() == 1;
  if (!plain) {
    const auto& o = conv.options();
    throw InvalidArgument(
        layer + ": only a plain 1x1 Conv2d can be tensor-parallel, this one has kernel " +
        std::to_string(conv.kernel_h()) + "x" + std::to_string(conv.kernel_w()) + ", stride (" +
        std::to_string(o.stride_h) + ", " + std::to_string(o.stride_w) + "), padding (" + std::to_string(o.padding_h) +
        ", " + std::to_string(o.padding_w) + "), dilation (" + std::to_string(o.dilation_h) + ", " +
        std::to_string(o.dilation_w) + "), groups " + std::to_string(conv.groups()));
  }
}

// ---------------------------------------------------------------------------
// ColumnParallelConv2d
// ---------------------------------------------------------------------------

ColumnParallelConv2d::ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool gather_output,
                         ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), tp_(tp), gather_output_(gather_output), has_bias_(o.bias),
      label_(detail::layer_label(type_name(), o.name)) {
  check_channels(label_, in_, out_, o);
  detail::make_affine_parameters(PartitionRule::column, label_, {out_, in_, 1, 1}, tp, o, default_weight_init(),
                                 default_bias_init(in_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<ColumnParallelConv2d> ColumnParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp, bool gather_output,
                                                      const std::string& name) {
  const std::string label = detail::layer_label("ColumnParallelConv2d", name);
  require_plain_1x1(serial, label);
  auto layer = std::make_unique<ColumnParallelConv2d>(serial.in_channels(), serial.out_channels(), tp, gather_output,
                                             detail::options_like(serial, name));
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Conv2d> ColumnParallelConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor ColumnParallelConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor ColumnParallelConv2d::master_bias() { return has_bias_ ? assemble_master(bias, bias.value, tp_) : Tensor(); }

Tensor ColumnParallelConv2d::forward(const Tensor& x) {
  return detail::column_forward(AffineMath::conv1x1, {tp_, gather_output_, std::nullopt}, x, weight,
                                has_bias_ ? &bias : nullptr, input_);
}

Tensor ColumnParallelConv2d::backward(const Tensor& grad_y) {
  return detail::column_backward(AffineMath::conv1x1, {tp_, gather_output_, std::nullopt}, grad_y, weight,
                                 has_bias_ ? &bias : nullptr, input_, label_);
}

// ---------------------------------------------------------------------------
// RowParallelConv2d
// ---------------------------------------------------------------------------

RowParallelConv2d::RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool input_is_parallel,
                         ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), tp_(tp), input_is_parallel_(input_is_parallel), has_bias_(o.bias),
      label_(detail::layer_label(type_name(), o.name)) {
  check_channels(label_, in_, out_, o);
  detail::make_affine_parameters(PartitionRule::row, label_, {out_, in_, 1, 1}, tp, o, default_weight_init(),
                                 default_bias_init(in_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<RowParallelConv2d> RowParallelConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                      bool input_is_parallel, const std::string& name) {
  const std::string label = detail::layer_label("RowParallelConv2d", name);
  require_plain_1x1(serial, label);
  auto layer = std::make_unique<RowParallelConv2d>(serial.in_channels(), serial.out_channels(), tp, input_is_parallel,
                                             detail::options_like(serial, name));
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Conv2d> RowParallelConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor RowParallelConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor RowParallelConv2d::master_bias() { return has_bias_ ? bias.value.clone() : Tensor(); }

Tensor RowParallelConv2d::forward(const Tensor& x) {
  return detail::row_forward(AffineMath::conv1x1, {tp_, input_is_parallel_, std::nullopt}, x, weight,
                             has_bias_ ? &bias : nullptr, input_local_);
}

Tensor RowParallelConv2d::backward(const Tensor& grad_y) {
  return detail::row_backward(AffineMath::conv1x1, {tp_, input_is_parallel_, std::nullopt}, grad_y, weight,
                              has_bias_ ? &bias : nullptr, input_local_, label_);
}

}  // namespace tessera::tp
