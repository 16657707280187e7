#include "tessera/tp/linear.hpp"

#include "tessera/tp/sharding.hpp"
#include "tp/parallel_affine.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

using detail::AffineMath;
using detail::PartitionRule;

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
  check_features(label_, in_, out_);
  detail::make_affine_parameters(PartitionRule::column, label_, {out_, in_}, tp, o, nn::Linear::default_weight_init(),
                                 nn::Linear::default_bias_init(in_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
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
  return detail::column_forward(AffineMath::linear, {tp_, gather_output_, sequence_dim_}, x, weight,
                                has_bias_ ? &bias : nullptr, input_);
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_y) {
  return detail::column_backward(AffineMath::linear, {tp_, gather_output_, sequence_dim_}, grad_y, weight,
                                 has_bias_ ? &bias : nullptr, input_, label_);
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
  check_features(label_, in_, out_);
  detail::make_affine_parameters(PartitionRule::row, label_, {out_, in_}, tp, o, nn::Linear::default_weight_init(),
                                 nn::Linear::default_bias_init(in_), weight, bias);
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
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
  return detail::row_forward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim_}, x, weight,
                             has_bias_ ? &bias : nullptr, input_local_);
}

Tensor RowParallelLinear::backward(const Tensor& grad_y) {
  return detail::row_backward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim_}, grad_y, weight,
                              has_bias_ ? &bias : nullptr, input_local_, label_);
}

}  // namespace tessera::tp
