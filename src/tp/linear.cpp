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
    : ParallelLayer(tp, {out_features, in_features}, o.bias, {o.sequence_dim, o.stride}),
      gather_output_(gather_output) {
  name_layer(o.name);
  check_features(label_, in_features, out_features);
  o = with_bias_rule(std::move(o), in_features);
  check_stride(label_, o, "out_features", out_features, tp);
  if (o.stride == 1) {
    detail::make_affine_parameters(PartitionRule::column, label_, master_shape_, tp, o,
                                   nn::Linear::default_weight_init(), nn::Linear::default_bias_init(in_features),
                                   weight, bias);
  } else {
    const std::int64_t block = out_features / o.stride;
    weight = make_strided(label_, "weight", master_shape_, {o.stride, block, in_features}, 1, tp, o,
                          o.weight_init.value_or(nn::Linear::default_weight_init()));
    if (o.bias) {
      bias = make_strided(label_, "bias", {out_features}, {o.stride, block}, 1, tp, o,
                          o.bias_init.value_or(nn::Linear::default_bias_init(in_features)));
    }
  }
  register_parameters();
}

std::unique_ptr<ColumnParallelLinear> ColumnParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                        bool gather_output, const std::string& name,
                                                                        std::optional<int> sequence_dim) {
  return linear_from_serial<ColumnParallelLinear>(serial, tp, gather_output, name, sequence_dim);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  const Parameter* b = has_bias_ ? &bias : nullptr;
  if (stride() == 1) {
    return detail::column_forward(AffineMath::linear, {tp_, gather_output_, sequence_dim(), compute_precision()}, x,
                                  weight, b, saved_input_);
  }
  const std::int64_t local_out = out_features() / tp_.size();
  const Parameter w = viewed_as(weight, {local_out, in_features()});
  const Parameter local_b = has_bias_ ? viewed_as(bias, {local_out}) : Parameter();
  const Tensor y = detail::column_forward(AffineMath::linear, {tp_, false, sequence_dim(), compute_precision()}, x, w,
                                          has_bias_ ? &local_b : nullptr, saved_input_);
  return gather_output_ ? strided_gather(y, stride(), tp_) : y;
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_y) {
  if (stride() == 1) {
    return detail::column_backward(AffineMath::linear, {tp_, gather_output_, sequence_dim(), compute_precision()},
                                   grad_y, weight, has_bias_ ? &bias : nullptr, saved_input_, label_);
  }
  const std::int64_t local_out = out_features() / tp_.size();
  Parameter w = viewed_as(weight, {local_out, in_features()});
  Parameter b = has_bias_ ? viewed_as(bias, {local_out}) : Parameter();
  const Tensor grad = gather_output_ ? strided_split(grad_y, stride(), tp_, label_) : grad_y;
  return detail::column_backward(AffineMath::linear, {tp_, false, sequence_dim(), compute_precision()}, grad, w,
                                 has_bias_ ? &b : nullptr, saved_input_, label_);
}

// ---------------------------------------------------------------------------
// RowParallelLinear
// ---------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(std::int64_t in_features, std::int64_t out_features, Communicator& tp,
                                     bool input_is_parallel, ParallelLinearOptions o)
    : ParallelLayer(tp, {out_features, in_features}, o.bias, {o.sequence_dim, o.stride}),
      input_is_parallel_(input_is_parallel) {
  name_layer(o.name);
  check_features(label_, in_features, out_features);
  o = with_bias_rule(std::move(o), in_features);
  check_stride(label_, o, "in_features", in_features, tp);
  // The replicated bias is the same at every stride; only the weight is interleaved.
  detail::make_affine_parameters(PartitionRule::row, label_, master_shape_, tp, o, nn::Linear::default_weight_init(),
                                 nn::Linear::default_bias_init(in_features), weight, bias);
  if (o.stride > 1) {
    weight = make_strided(label_, "weight", master_shape_, {out_features, o.stride, in_features / o.stride}, 2, tp, o,
                          o.weight_init.value_or(nn::Linear::default_weight_init()));
  }
  register_parameters();
}

std::unique_ptr<RowParallelLinear> RowParallelLinear::from_serial(const nn::Linear& serial, Communicator& tp,
                                                                  bool input_is_parallel, const std::string& name,
                                                                  std::optional<int> sequence_dim) {
  return linear_from_serial<RowParallelLinear>(serial, tp, input_is_parallel, name, sequence_dim);
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Parameter* b = has_bias_ ? &bias : nullptr;
  if (stride() == 1) {
    return detail::row_forward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim(), compute_precision()}, x,
                               weight, b, saved_input_);
  }
  const Parameter w = viewed_as(weight, {out_features(), in_features() / tp_.size()});
  const Tensor x_local = input_is_parallel_ ? x : strided_split(x, stride(), tp_, label_);
  return detail::row_forward(AffineMath::linear, {tp_, true, sequence_dim(), compute_precision()}, x_local, w, b,
                             saved_input_);
}

Tensor RowParallelLinear::backward(const Tensor& grad_y) {
  Parameter* b = has_bias_ ? &bias : nullptr;
  if (stride() == 1) {
    return detail::row_backward(AffineMath::linear, {tp_, input_is_parallel_, sequence_dim(), compute_precision()},
                                grad_y, weight, b, saved_input_, label_);
  }
  Parameter w = viewed_as(weight, {out_features(), in_features() / tp_.size()});
  const Tensor dx_local = detail::row_backward(AffineMath::linear, {tp_, true, sequence_dim(), compute_precision()},
                                               grad_y, w, b, saved_input_, label_);
  return input_is_parallel_ ? dx_local : strided_gather(dx_local, stride(), tp_);
}

}  // namespace tessera::tp
