#include "tessera/tp/linear.hpp"

#include <utility>

#include "tessera/tp/mappings.hpp"
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

// The layer's options with the seed's biased_normal rule applied: a biased_normal weight
// without an explicit bias spec draws its bias from the same normal.
ParallelLinearOptions with_bias_rule(ParallelLinearOptions o, std::int64_t in) {
  if (o.bias && !o.bias_init && o.weight_init) {
    o.bias_init = bias_init_for(*o.weight_init, nn::Linear::default_bias_init(in));
  }
  return o;
}

void check_stride(const std::string& label, const ParallelLinearOptions& o, const char* partitioned,
                  std::int64_t extent, const Communicator& tp) {
  if (o.stride < 1) {
    throw InvalidArgument(label + ": stride " + std::to_string(o.stride) + " must be >= 1");
  }
  // Stride 1 is the plain partition, uneven extents included (make_tp_sharded). A strided
  // partition stays even: each of the stride blocks is split the same way on every rank,
  // so that the rank's pieces form one contiguous block of the 3-dim form.
  if (o.stride > 1 && extent % (o.stride * tp.size()) != 0) {
    throw ShapeError(label + ": with stride " + std::to_string(o.stride) + ", " + partitioned + " (" +
                     std::to_string(extent) + ") must divide by stride * tp size (" + std::to_string(o.stride) +
                     " * " + std::to_string(tp.size()) + "); uneven shards are supported with stride 1 only");
  }
}

// The strided parameters (see linear.hpp): `stored` is the 3-dim form of the layer's
// `layer` shape, sharded along `dim`; the init spec keeps the layer's shape for its fans.
Parameter make_strided(const std::string& label, const std::string& name, const Shape& layer, const Shape& stored,
                       int dim, const Communicator& tp, const ParallelLinearOptions& o, InitSpec init) {
  init.layer_shape = layer;
  return make_tp_sharded(label, name, stored, dim, tp, o.dtype, o.device, init);
}

// A Parameter whose value and gradient are `shape`-shaped views of p's (the 2-dim weight
// of a strided layer): the shared math reads the value and adds into the gradient.
Parameter viewed_as(const Parameter& p, const Shape& shape) {
  Parameter v;
  v.value = p.value.reshape(shape);
  if (p.grad.defined()) v.grad = p.grad.reshape(shape);
  return v;
}

// The features of x's last dim as `stride` blocks: this rank's piece of each block, in
// block order (split), and the inverse (gather). The extent divides by stride * tp
// (checked at construction for the layer's own features).
Tensor strided_split(const Tensor& x, std::int64_t stride, Communicator& tp, const std::string& label) {
  const std::int64_t features = x.size(x.dim() - 1);
  if (features % (stride * tp.size()) != 0) {
    throw ShapeError(label + ": input " + x.str() + " has " + std::to_string(features) +
                     " features, which do not divide by stride * tp size (" + std::to_string(stride) + " * " +
                     std::to_string(tp.size()) + ")");
  }
  Shape blocks = x.shape();
  blocks.back() = stride;
  blocks.push_back(features / stride);
  Shape out = x.shape();
  out.back() = features / tp.size();
  return split_along(x.contiguous().reshape(blocks), -1, tp).contiguous().reshape(out);
}

Tensor strided_gather(const Tensor& x, std::int64_t stride, Communicator& tp) {
  const std::int64_t features = x.size(x.dim() - 1);
  Shape blocks = x.shape();
  blocks.back() = stride;
  blocks.push_back(features / stride);
  Shape out = x.shape();
  out.back() = features * tp.size();
  return gather_along(x.contiguous().reshape(blocks), -1, tp).reshape(out);
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

// Both rules shard a serial layer alike: build the layer with the serial one's options,
// then copy this rank's block of its weights in. Only the layer type and its flag
// (gather_output / input_is_parallel) differ.
template <class Layer>
std::unique_ptr<Layer> linear_from_serial(const nn::Linear& serial, Communicator& tp, bool flag,
                                          const std::string& name, std::optional<int> sequence_dim) {
  return detail::with_serial_weights(std::make_unique<Layer>(serial.in_features(), serial.out_features(), tp, flag,
                                                             detail::options_like(serial, name, sequence_dim)),
                                     serial, name);
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
      stride_(o.stride),
      label_(detail::layer_label(type_name(), o.name)) {
  check_features(label_, in_, out_);
  o = with_bias_rule(std::move(o), in_);
  check_stride(label_, o, "out_features", out_, tp);
  if (stride_ == 1) {
    detail::make_affine_parameters(PartitionRule::column, label_, {out_, in_}, tp, o,
                                   nn::Linear::default_weight_init(), nn::Linear::default_bias_init(in_), weight, bias);
  } else {
    const std::int64_t block = out_ / stride_;
    weight = make_strided(label_, "weight", {out_, in_}, {stride_, block, in_}, 1, tp, o,
                          o.weight_init.value_or(nn::Linear::default_weight_init()));
    if (has_bias_) {
      bias = make_strided(label_, "bias", {out_}, {stride_, block}, 1, tp, o,
                          o.bias_init.value_or(nn::Linear::default_bias_init(in_)));
    }
  }
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<ColumnParallelLinear> ColumnParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                        bool gather_output, const std::string& name,
                                                                        std::optional<int> sequence_dim) {
  return linear_from_serial<ColumnParallelLinear>(serial, tp, gather_output, name, sequence_dim);
}

std::unique_ptr<nn::Linear> ColumnParallelLinear::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor ColumnParallelLinear::master_weight() {
  return assemble_master(weight, weight.value, tp_).reshape({out_, in_});
}
Tensor ColumnParallelLinear::master_bias() {
  return has_bias_ ? assemble_master(bias, bias.value, tp_).reshape({out_}) : Tensor();
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  if (stride_ == 1) {
    return detail::column_forward(AffineMath::linear, {tp_, gather_output_, sequence_dim_, compute_precision()}, x, weight,
                                  has_bias_ ? &bias : nullptr, input_);
  }
  const std::int64_t local_out = out_ / tp_.size();
  const Parameter w = viewed_as(weight, {local_out, in_});
  const Parameter b = has_bias_ ? viewed_as(bias, {local_out}) : Parameter();
  const Tensor y = detail::column_forward(AffineMath::linear, {tp_, false, sequence_dim_, compute_precision()}, x, w,
                                          has_bias_ ? &b : nullptr, input_);
  return gather_output_ ? strided_gather(y, stride_, tp_) : y;
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_y) {
  if (stride_ == 1) {
    return detail::column_backward(AffineMath::linear, {tp_, gather_output_, sequence_dim_, compute_precision()}, grad_y, weight,
                                   has_bias_ ? &bias : nullptr, input_, label_);
  }
  const std::int64_t local_out = out_ / tp_.size();
  Parameter w = viewed_as(weight, {local_out, in_});
  Parameter b = has_bias_ ? viewed_as(bias, {local_out}) : Parameter();
  const Tensor grad = gather_output_ ? strided_split(grad_y, stride_, tp_, label_) : grad_y;
  return detail::column_backward(AffineMath::linear, {tp_, false, sequence_dim_, compute_precision()}, grad, w, has_bias_ ? &b : nullptr,
                                 input_, label_);
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
      stride_(o.stride),
      label_(detail::layer_label(type_name(), o.name)) {
  check_features(label_, in_, out_);
  o = with_bias_rule(std::move(o), in_);
  check_stride(label_, o, "in_features", in_, tp);
  // The replicated bias is the same at every stride; only the weight is interleaved.
  detail::make_affine_parameters(PartitionRule::row, label_, {out_, in_}, tp, o, nn::Linear::default_weight_init(),
                                 nn::Linear::default_bias_init(in_), weight, bias);
  if (stride_ > 1) {
    weight = make_strided(label_, "weight", {out_, in_}, {out_, stride_, in_ / stride_}, 2, tp, o,
                          o.weight_init.value_or(nn::Linear::default_weight_init()));
  }
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

std::unique_ptr<RowParallelLinear> RowParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                  bool input_is_parallel, const std::string& name,
                                                                  std::optional<int> sequence_dim) {
  return linear_from_serial<RowParallelLinear>(serial, tp, input_is_parallel, name, sequence_dim);
}

std::unique_ptr<nn::Linear> RowParallelLinear::to_serial() {
  return serial_with(master_weight(), master_bias(), weight, bias, has_bias_);
}

Tensor RowParallelLinear::master_weight() {
  return assemble_master(weight, weight.value, tp_).reshape({out_, in_});
}
Tensor RowParallelLinear::master_bias() { return has_bias_ ? bias.value.clone() : Tensor(); }

Tensor RowParallelLinear::forward(const Tensor& x) {
  if (stride_ == 1) {
    return detail::row_forward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim_, compute_precision()}, x, weight,
                               has_bias_ ? &bias : nullptr, input_local_);
  }
  const Parameter w = viewed_as(weight, {out_, in_ / tp_.size()});
  const Tensor x_local = input_is_parallel_ ? x : strided_split(x, stride_, tp_, label_);
  return detail::row_forward(AffineMath::linear, {tp_, true, sequence_dim_, compute_precision()}, x_local, w, has_bias_ ? &bias : nullptr,
                             input_local_);
}

Tensor RowParallelLinear::backward(const Tensor& grad_y) {
  if (stride_ == 1) {
    return detail::row_backward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim_, compute_precision()}, grad_y, weight,
                                has_bias_ ? &bias : nullptr, input_local_, label_);
  }
  Parameter w = viewed_as(weight, {out_, in_ / tp_.size()});
  const Tensor dx_local = detail::row_backward(AffineMath::linear, {tp_, true, sequence_dim_, compute_precision()}, grad_y, w,
                                               has_bias_ ? &bias : nullptr, input_local_, label_);
  return input_is_parallel_ ? dx_local : strided_gather(dx_local, stride_, tp_);
}

}  // namespace tessera::tp
