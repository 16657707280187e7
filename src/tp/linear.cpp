#include "tessera/tp/linear.hpp"

#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

void check_features(const std::string& label, std::int64_t in, std::int64_t out) {
  if (in < 1 || out < 1) {
    throw InvalidArgument(label + ": in_features " + std::to_string(in) + " and out_features " +
                          std::to_string(out) + " must be >= 1");
  }
}

// A serial Linear carrying `weight` / `bias` masters and the same init specs.
std::unique_ptr<nn::Linear> serial_with(const Tensor& weight, const Tensor& bias, const Parameter& w,
                                        const Parameter& b, bool has_bias) {
  auto serial = std::make_unique<nn::Linear>(weight.size(1), weight.size(0), has_bias, weight.dtype(),
                                             weight.device());
  detail::copy_master(serial->weight, weight, w);
  if (has_bias) detail::copy_master(serial->bias, bias, b);
  return serial;
}

}  // namespace

// ---------------------------------------------------------------------------
// ColumnParallelLinear
// ---------------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features, Communicator& tp,
                                           bool gather_output, ParallelLinearOptions o)
    : in_(in_features),
      out_(out_features),
      tp_(tp),
      gather_output_(gather_output),
      has_bias_(o.bias),
      sequence_dim_(o.sequence_dim),
      label_(detail::layer_label(type_name(), o.name)) {
  const std::string& label = label_;
  check_features(label, in_, out_);
  weight = make_tp_sharded(label, "weight", {out_, in_}, 0, tp, o.dtype, o.device,
                           o.weight_init.value_or(nn::Linear::default_weight_init()));
  register_parameter("weight", weight);
  if (has_bias_) {
    bias = make_tp_sharded(label, "bias", {out_}, 0, tp, o.dtype, o.device,
                           o.bias_init.value_or(nn::Linear::default_bias_init(in_)));
    register_parameter("bias", bias);
  }
}

std::unique_ptr<ColumnParallelLinear> ColumnParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                        bool gather_output, const std::string& name,
                                                                        std::optional<int> sequence_dim) {
  auto layer = std::make_unique<ColumnParallelLinear>(serial.in_features(), serial.out_features(), tp,
                                                      gather_output, detail::options_like(serial, name, sequence_dim));
  const std::string label = detail::layer_label("ColumnParallelLinear", name);
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Linear> ColumnParallelLinear::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor ColumnParallelLinear::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor ColumnParallelLinear::master_bias() {
  return has_bias_ ? assemble_master(bias, bias.value, tp_) : Tensor();
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  const Tensor input = x.contiguous();
  input_ = sequence_dim_ ? sequence_all_gather(input, *sequence_dim_, tp_) : copy_to_parallel(input, tp_);
  Tensor y = nn::functional::linear(input_, weight.value, has_bias_ ? bias.value : Tensor());
  return gather_output_ ? gather_from_parallel(y, -1, tp_) : y;
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_y) {
  if (!input_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  const Tensor grad_local = gather_output_ ? gather_from_parallel_backward(grad_y.contiguous(), -1, tp_) : grad_y.contiguous();
  Tensor no_bias;
  Tensor dx = nn::functional::linear_backward(grad_local, input_, weight.value, weight.grad,
                                              has_bias_ ? bias.grad : no_bias);
  input_ = Tensor();  // one backward per forward, as the serial layers
  return sequence_dim_ ? sequence_all_gather_backward(dx, *sequence_dim_, tp_) : copy_to_parallel_backward(dx, tp_);
}

// ---------------------------------------------------------------------------
// RowParallelLinear
// ---------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(std::int64_t in_features, std::int64_t out_features, Communicator& tp,
                                     bool input_is_parallel, ParallelLinearOptions o)
    : in_(in_features),
      out_(out_features),
      tp_(tp),
      input_is_parallel_(input_is_parallel),
      has_bias_(o.bias),
      sequence_dim_(o.sequence_dim),
      label_(detail::layer_label(type_name(), o.name)) {
  const std::string& label = label_;
  check_features(label, in_, out_);
  weight = make_tp_sharded(label, "weight", {out_, in_}, 1, tp, o.dtype, o.device,
                           o.weight_init.value_or(nn::Linear::default_weight_init()));
  register_parameter("weight", weight);
  if (has_bias_) {
    // Replicated: added once, after the reduction, so it is not counted tp times.
    bias = Parameter(Tensor::zeros({out_}, o.dtype, o.device), o.bias_init.value_or(nn::Linear::default_bias_init(in_)));
    // Added to a sequence shard, its gradient on each rank covers only that shard.
    bias.partial_grad_over_tp = sequence_dim_.has_value();
    register_parameter("bias", bias);
  }
}

std::unique_ptr<RowParallelLinear> RowParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                  bool input_is_parallel, const std::string& name,
                                                                  std::optional<int> sequence_dim) {
  auto layer = std::make_unique<RowParallelLinear>(serial.in_features(), serial.out_features(), tp,
                                                   input_is_parallel, detail::options_like(serial, name, sequence_dim));
  const std::string label = detail::layer_label("RowParallelLinear", name);
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if (layer->has_bias_) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  return layer;
}

std::unique_ptr<nn::Linear> RowParallelLinear::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor RowParallelLinear::master_weight() { return assemble_master(weight, weight.value, tp_); }
Tensor RowParallelLinear::master_bias() { return has_bias_ ? bias.value.clone() : Tensor(); }

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor input = x.contiguous();
  input_local_ = input_is_parallel_ ? input : scatter_to_parallel(input, -1, tp_);
  Tensor partial = nn::functional::linear(input_local_, weight.value, Tensor());
  Tensor y = sequence_dim_ ? sequence_reduce_scatter(partial, *sequence_dim_, tp_) : reduce_from_parallel(partial, tp_);
  if (has_bias_) ops::add_bias(y, bias.value, -1);
  return y;
}

Tensor RowParallelLinear::backward(const Tensor& grad_output) {
  if (!input_local_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  const Tensor grad_y = grad_output.contiguous();
  // Without sequence parallelism the output (and so its gradient) is replicated over
  // tp: every rank adds the same full bias gradient, keeping the replicated bias
  // identical without communication. With it, each rank adds its shard's part.
  if (has_bias_) ops::accumulate_bias_grad(grad_y, bias.grad, -1);
  const Tensor grad = sequence_dim_ ? sequence_reduce_scatter_backward(grad_y, *sequence_dim_, tp_)
                                    : reduce_from_parallel_backward(grad_y, tp_);
  Tensor no_bias;
  Tensor dx_local = nn::functional::linear_backward(grad, input_local_, weight.value, weight.grad, no_bias);
  input_local_ = Tensor();
  return input_is_parallel_ ? dx_local : scatter_to_parallel_backward(dx_local, -1, tp_);
}

}  // namespace tessera::tp
