#include "tp/parallel_affine.hpp"

#include <utility>

#include "tessera/error.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"

namespace tessera::tp::detail {

namespace {

bool is_linear(const AffineMath& math) { return math.kind == AffineMath::Kind::linear; }

int feature_dim(const AffineMath& math) { return is_linear(math) ? -1 : 1; }

Tensor affine(const AffineMath& math, const Tensor& x, const Tensor& w, const Tensor& b, Precision precision) {
  return is_linear(math) ? nn::functional::linear(x, w, b, precision)
                         : nn::functional::conv2d(x, w, b, math.conv, precision);
}

Tensor affine_backward(const AffineMath& math, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw,
                       Tensor& db, Precision precision) {
  return is_linear(math) ? nn::functional::linear_backward(dy, x, w, dw, db, precision)
                         : nn::functional::conv2d_backward(dy, x, w, dw, db, math.conv, precision);
}

// reduce_from_parallel (forward) and copy_to_parallel_backward: the sum over tp. Both
// return a new tensor and leave their input alone; here the input is a temporary this
// file just computed and nobody else holds, so it is summed in place instead of copied
// first.
Tensor sum_over_tp_in_place(Tensor partial, Communicator& tp) {
  if (tp.size() > 1) tp.all_reduce(partial, ReduceOp::sum);
  return partial;
}

void require_forward(const Tensor& saved_input, const std::string& label) {
  if (!saved_input.defined()) throw InvalidArgument(label + ": backward without a preceding forward");
}

}  // namespace

void make_affine_parameters(PartitionRule rule, const std::string& label, const Shape& weight_shape,
                            Communicator& tp, const ParallelLinearOptions& o, const InitSpec& default_weight_init,
                            const InitSpec& default_bias_init, Parameter& weight, Parameter& bias) {
  const int weight_dim = rule == PartitionRule::column ? 0 : 1;
  weight = make_tp_sharded(label, "weight", weight_shape, weight_dim, tp, o.dtype, o.device,
                           o.weight_init.value_or(default_weight_init));
  if (!o.bias) return;
  const InitSpec bias_init = o.bias_init.value_or(default_bias_init);
  if (rule == PartitionRule::column) {
    bias = make_tp_sharded(label, "bias", {weight_shape[0]}, 0, tp, o.dtype, o.device, bias_init);
  } else {
    // Replicated: added once, after the reduction, so it is not counted tp times.
    bias = Parameter(Tensor::zeros({weight_shape[0]}, o.dtype, o.device), bias_init);
    // Added to a sequence shard, its gradient on each rank covers only that shard.
    bias.partial_grad_over_tp = o.sequence_dim.has_value();
  }
}

Tensor column_forward(AffineMath math, const ColumnSplit& split, const Tensor& x, const Parameter& weight,
                      const Parameter* bias, Tensor& saved_input) {
  const Tensor input = x.contiguous();
  saved_input = split.sequence_dim ? sequence_all_gather(input, *split.sequence_dim, split.tp)
                                   : copy_to_parallel(input, split.tp);
  Tensor y = affine(math, saved_input, weight.value, bias ? bias->value : Tensor(), split.precision);
  return split.gather_output ? gather_from_parallel(y, feature_dim(math), split.tp, weight.global_shape[0]) : y;
}

Tensor column_backward(AffineMath math, const ColumnSplit& split, const Tensor& grad_y, Parameter& weight,
                       Parameter* bias, Tensor& saved_input, const std::string& label) {
  require_forward(saved_input, label);
  const Tensor grad = grad_y.contiguous();
  const Tensor grad_local = split.gather_output ? gather_from_parallel_backward(grad, feature_dim(math), split.tp) : grad;
  Tensor no_bias;
  Tensor dx = affine_backward(math, grad_local, saved_input, weight.value, weight.grad, bias ? bias->grad : no_bias,
                              split.precision);
  saved_input = Tensor();  // one backward per forward, as the serial layers
  return split.sequence_dim ? sequence_all_gather_backward(dx, *split.sequence_dim, split.tp)
                            : sum_over_tp_in_place(std::move(dx), split.tp);  // copy_to_parallel_backward
}

namespace {
// The bias a row layer adds to (or whose gradient it takes from) an output of `dims`
// dims: the whole replicated bias, or — when the output is reduce-scattered along the
// feature dim itself — this rank's slice of it (its gradient then covers only that
// slice, a partial sum over tp like any sequence-sharded bias gradient).
Tensor row_bias_view(const Tensor& bias, const RowSplit& split, const AffineMath& math, int dims) {
  if (!split.sequence_dim) return bias;
  const int scatter = *split.sequence_dim < 0 ? dims + *split.sequence_dim : *split.sequence_dim;
  const int feature = feature_dim(math) < 0 ? dims + feature_dim(math) : feature_dim(math);
  if (scatter != feature) return bias;
  const ShardRange slice = shard_range(bias.shape()[0], split.tp.size(), split.tp.rank());
  return bias.narrow(0, slice.start, slice.length);
}
}  // namespace

Tensor row_forward(AffineMath math, const RowSplit& split, const Tensor& x, const Parameter& weight,
                   const Parameter* bias, Tensor& saved_input) {
  const Tensor input = x.contiguous();
  saved_input = split.input_is_parallel ? input : scatter_to_parallel(input, feature_dim(math), split.tp);
  Tensor partial = affine(math, saved_input, weight.value, Tensor(), split.precision);
  Tensor y = split.sequence_dim ? sequence_reduce_scatter(partial, *split.sequence_dim, split.tp)
                                : sum_over_tp_in_place(std::move(partial), split.tp);  // reduce_from_parallel
  if (bias) ops::add_bias(y, row_bias_view(bias->value, split, math, y.dim()), feature_dim(math));
  return y;
}

Tensor row_backward(AffineMath math, const RowSplit& split, const Tensor& grad_y, Parameter& weight, Parameter* bias,
                    Tensor& saved_input, const std::string& label) {
  require_forward(saved_input, label);
  const Tensor grad_out = grad_y.contiguous();
  // Without sequence parallelism the output (and so its gradient) is replicated over
  // tp: every rank adds the same full bias gradient, keeping the replicated bias
  // identical without communication. With it, each rank adds its shard's part.
  if (bias) {
    Tensor grad_slice = row_bias_view(bias->grad, split, math, grad_out.dim());
    ops::accumulate_bias_grad(grad_out, grad_slice, feature_dim(math));
  }
  const Tensor grad = split.sequence_dim ? sequence_reduce_scatter_backward(grad_out, *split.sequence_dim, split.tp)
                                         : reduce_from_parallel_backward(grad_out, split.tp);
  Tensor no_bias;
  const Tensor dx_local = affine_backward(math, grad, saved_input, weight.value, weight.grad, no_bias, split.precision);
  saved_input = Tensor();
  return split.input_is_parallel
             ? dx_local
             : scatter_to_parallel_backward(dx_local, feature_dim(math), split.tp, weight.global_shape[1]);
}

}  // namespace tessera::tp::detail
