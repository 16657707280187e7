#pragma once
// Private: the one implementation of the column and row partition rules, shared by
// every tensor-parallel affine layer (ColumnParallelLinear / RowParallelLinear and the
// k x k ColumnParallelConv2d / RowParallelConv2d). A layer keeps its own parameters and
// the input it saved for backward; these functions hold the rule:
//
// Column: weight [out, in, ...] sharded along dim 0 with its bias. The input is
//   replicated (copy_to_parallel: backward all-reduces its gradient) or, with sequence
//   parallelism, all-gathered along the sequence dim; the output stays sharded along
//   the feature dim or is all-gathered (gather_output).
// Row: weight sharded along dim 1. The input is sharded along the feature dim (given so,
//   or split here); the partial outputs are all-reduced (or reduce-scattered along the
//   sequence dim), then the replicated bias is added once.
// The features may be uneven over tp (shard_range: the first out % tp or in % tp ranks
// hold one feature / channel more); the gathers pass the layer's global extent, so the
// blocks travel padded in one collective. The sequence dim must still divide (see
// mappings.hpp).

#include <optional>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/init_spec.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/parameter.hpp"
#include "tessera/tensor.hpp"
#include "tessera/tp/linear.hpp"

namespace tessera::tp::detail {

// The layer math being sharded: y = x·Wᵀ + b over the last dim (Linear), or a Conv2d
// over the channel dim 1 of NCHW with its stride, padding and dilation. Whatever the
// kernel, a conv's output channel o is a sum over input channels of per-channel window
// sums, so its weight [out, in, kh, kw] splits over out (column) and over in (row)
// exactly as a Linear's [out, in]; the spatial options act inside each rank's share.
struct AffineMath {
  enum class Kind { linear, conv2d };
  Kind kind = Kind::linear;
  nn::functional::Conv2dOptions conv;  // conv2d only

  static const AffineMath linear;
  static AffineMath conv2d(const nn::functional::Conv2dOptions& options) { return {Kind::conv2d, options}; }
};
inline const AffineMath AffineMath::linear{};

enum class PartitionRule { column, row };

struct ColumnSplit {
  Communicator& tp;
  bool gather_output;
  std::optional<int> sequence_dim;
  Precision precision = Precision::fp32;  // the layer's compute_precision(), for its GEMMs
};

struct RowSplit {
  Communicator& tp;
  bool input_is_parallel;
  std::optional<int> sequence_dim;
  Precision precision = Precision::fp32;
};

// The layer's weight (shape [out, in, ...]) and bias ([out]) under `rule`: the column
// bias is sharded with the weight; the row bias is replicated, with a partial gradient
// per rank under sequence parallelism.
void make_affine_parameters(PartitionRule rule, const std::string& label, const Shape& weight_shape,
                            Communicator& tp, const ParallelLinearOptions& options, const InitSpec& default_weight_init,
                            const InitSpec& default_bias_init, Parameter& weight, Parameter& bias);

// Forward saves what backward needs in `saved_input`; backward consumes it (one
// backward per forward; a backward without a forward is an InvalidArgument naming
// `label`). `bias` is null for a layer without one.
Tensor column_forward(AffineMath math, const ColumnSplit& split, const Tensor& x, const Parameter& weight,
                      const Parameter* bias, Tensor& saved_input);
Tensor column_backward(AffineMath math, const ColumnSplit& split, const Tensor& grad_y, Parameter& weight,
                       Parameter* bias, Tensor& saved_input, const std::string& label);
Tensor row_forward(AffineMath math, const RowSplit& split, const Tensor& x, const Parameter& weight,
                   const Parameter* bias, Tensor& saved_input);
Tensor row_backward(AffineMath math, const RowSplit& split, const Tensor& grad_y, Parameter& weight, Parameter* bias,
                    Tensor& saved_input, const std::string& label);

}  // namespace tessera::tp::detail
