#include "tessera/tp/conv2d.hpp"

#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

constexpr int kChannelDim = 1;  // NCHW

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
// TpColConv2d
// ---------------------------------------------------------------------------

TpColConv2d::TpColConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool gather_output,
                         ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), tp_(tp), gather_output_(gather_output), has_bias_(o.bias),
      label_(detail::layer_label(type_name(), o.name)) {
  const std::string& label = label_;
  if (in_ < 1 || out_ < 1) {
    throw InvalidArgument(label + ": in_channels " + std::to_string(in_) + " and out_channels " +
                          std::to_string(out_) + " must be >= 1");
  }
  weight = make_tp_sharded(label, "weight", {out_, in_, 1, 1}, 0, tp, o.dtype, o.device,
                           o.weight_init.value_or(default_weight_init()));
  register_parameter("weight", weight);
  if (has_bias_) {
    bias = make_tp_sharded(label, "bias", {out_}, 0, tp, o.dtype, o.device,
                           o.bias_init.value_or(default_bias_init(in_)));
    register_parameter("bias", bias);
  }
}

std::unique_ptr<TpColConv2d> TpColConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp, bool gather_output,
                                                      const std::string& name) {
  const std::string label = detail::layer_label("TpColConv2d", name);
  require_plain_1x1(serial, label);
  auto layer = std::make_unique<TpColConv2d>(serial.in_channels(), serial.out_channels(), tp, gather_output,
                                             detail::options_like(serial, name));
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Conv2d> TpColConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor TpColConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor TpColConv2d::master_bias() { return has_bias_ ? assemble_master(bias, bias.value, tp_) : Tensor(); }

Tensor TpColConv2d::forward(const Tensor& x) {
  input_ = copy_to_parallel(x.contiguous(), tp_);
  Tensor y = nn::functional::conv2d(input_, weight.value, has_bias_ ? bias.value : Tensor(), {});
  return gather_output_ ? gather_from_parallel(y, kChannelDim, tp_) : y;
}

Tensor TpColConv2d::backward(const Tensor& grad_y) {
  if (!input_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  const Tensor grad = grad_y.contiguous();
  const Tensor grad_local = gather_output_ ? gather_from_parallel_backward(grad, kChannelDim, tp_) : grad;
  Tensor no_bias;
  Tensor dx = nn::functional::conv2d_backward(grad_local, input_, weight.value, weight.grad,
                                              has_bias_ ? bias.grad : no_bias, {});
  input_ = Tensor();  // one backward per forward
  return copy_to_parallel_backward(dx, tp_);
}

// ---------------------------------------------------------------------------
// TpRowConv2d
// ---------------------------------------------------------------------------

TpRowConv2d::TpRowConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool input_is_parallel,
                         ParallelLinearOptions o)
    : in_(in_channels), out_(out_channels), tp_(tp), input_is_parallel_(input_is_parallel), has_bias_(o.bias),
      label_(detail::layer_label(type_name(), o.name)) {
  const std::string& label = label_;
  if (in_ < 1 || out_ < 1) {
    throw InvalidArgument(label + ": in_channels " + std::to_string(in_) + " and out_channels " +
                          std::to_string(out_) + " must be >= 1");
  }
  weight = make_tp_sharded(label, "weight", {out_, in_, 1, 1}, 1, tp, o.dtype, o.device,
                           o.weight_init.value_or(default_weight_init()));
  register_parameter("weight", weight);
  if (has_bias_) {
    bias = Parameter(Tensor::zeros({out_}, o.dtype, o.device), o.bias_init.value_or(default_bias_init(in_)));
    register_parameter("bias", bias);
  }
}

std::unique_ptr<TpRowConv2d> TpRowConv2d::from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                      bool input_is_parallel, const std::string& name) {
  const std::string label = detail::layer_label("TpRowConv2d", name);
  require_plain_1x1(serial, label);
  auto layer = std::make_unique<TpRowConv2d>(serial.in_channels(), serial.out_channels(), tp, input_is_parallel,
                                             detail::options_like(serial, name));
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Conv2d> TpRowConv2d::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor TpRowConv2d::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor TpRowConv2d::master_bias() { return has_bias_ ? bias.value.clone() : Tensor(); }

Tensor TpRowConv2d::forward(const Tensor& x) {
  const Tensor input = x.contiguous();
  input_local_ = input_is_parallel_ ? input : scatter_to_parallel(input, kChannelDim, tp_);
  Tensor partial = nn::functional::conv2d(input_local_, weight.value, Tensor(), {});
  Tensor y = reduce_from_parallel(partial, tp_);
  if (has_bias_) ops::add_bias(y, bias.value, kChannelDim);
  return y;
}

Tensor TpRowConv2d::backward(const Tensor& grad_y) {
  if (!input_local_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  const Tensor grad = reduce_from_parallel_backward(grad_y.contiguous(), tp_);
  if (has_bias_) ops::accumulate_bias_grad(grad, bias.grad, kChannelDim);
  Tensor no_bias;
  Tensor dx_local = nn::functional::conv2d_backward(grad, input_local_, weight.value, weight.grad, no_bias, {});
  input_local_ = Tensor();
  return input_is_parallel_ ? dx_local : scatter_to_parallel_backward(dx_local, kChannelDim, tp_);
}

}  // namespace tessera::tp
