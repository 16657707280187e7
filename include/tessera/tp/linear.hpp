#pragma once
// Column- and row-parallel Linear layers (Megatron-LM, ml.models.parallel, CREDIT's
// TpColLinear / TpRowLinear, PyTorch's Colwise / Rowwise).
//
// ColumnParallelLinear: weight [out, in] sharded along dim 0 (tp: Shard(0)), bias
//   sharded with it. out_features (column) and in_features (row) need not divide by
//   the tp size: the first extent % tp ranks hold one feature more (shard_range). Input replicated; backward all-reduces the input gradient. With
//   gather_output the output is all-gathered along the feature dim, otherwise each rank
//   returns its out/tp features (to feed a RowParallelLinear).
// RowParallelLinear: weight [out, in] sharded along dim 1 (tp: Shard(1)); input sharded
//   along its last dim (input_is_parallel) or split here. The partial outputs are
//   all-reduced, then the bias — replicated — is added once.
//
// Parameters are named "weight" and "bias" like nn::Linear, so FQNs, checkpoints and
// initialisation agree with the serial model; values start at zero until
// nn::initialize_parameters or a from_serial copy fills them.
//
// stride (ml.models.parallel's, Megatron-LM's): the partitioned features are `stride`
// blocks laid end to end (a fused [q; k; v] projection has stride 3), and rank r holds
// the r-th piece of every block rather than one contiguous range. The weight is then
// stored as [stride, out/stride, in] sharded along dim 1 (column; the bias as
// [stride, out/stride]) or [out, stride, in/stride] sharded along dim 2 (row): the
// same row-major elements as the serial [out, in], with each rank's pieces forming a
// contiguous block, so initialisation (InitSpec::layer_shape keeps the fans of
// [out, in]), checkpoints at any layout and gradient handling need nothing new. The
// layer still computes the serial result: gather_output and the row layer's split of
// a replicated input take the interleaving into account, and a strided column layer
// without gather_output feeds a row layer of the same stride (input_is_parallel).
// master_weight() returns [out, in]; a checkpoint holds the 3-dim form.

#include <memory>
#include <optional>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/parallel_layer.hpp"

namespace tessera::tp {

struct ParallelLinearOptions {
  bool bias = true;
  DType dtype = DType::f32;
  Device device = Device::host();
  std::string name;                    // used in error messages (e.g. the FQN)
  std::optional<InitSpec> weight_init;  // default: nn::Linear's
  std::optional<InitSpec> bias_init;    // default: nn::Linear's
  // Sequence parallelism (Megatron-LM): activations outside the layer are sharded along
  // this dim over tp. A column layer all-gathers its input along it (and reduce-
  // scatters the input gradient); a row layer reduce-scatters its output along it
  // instead of all-reducing (and all-gathers the output gradient). The row layer's
  // replicated bias then gets a partial gradient per rank (partial_grad_over_tp).
  std::optional<int> sequence_dim;
  // Interleaved partition (see above); the partitioned extent must divide by stride * tp
  // (with stride 1 it need not divide at all: uneven shards follow shard_range).
  std::int64_t stride = 1;
};

// The members both share (extents, has_bias, sequence_dim, stride, master_weight,
// master_bias, to_serial) are ParallelLayer<nn::Linear>'s (parallel_layer.hpp).
class ColumnParallelLinear : public ParallelLayer<nn::Linear> {
 public:
  ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features, Communicator& tp,
                       bool gather_output = true, ParallelLinearOptions options = {});
  // Shards a serial layer's weights (this rank keeps its block).
  static std::unique_ptr<ColumnParallelLinear> from_serial(const nn::Linear& serial, Communicator& tp,
                                                           bool gather_output = true, const std::string& name = "",
                                                           std::optional<int> sequence_dim = std::nullopt);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  bool gather_output() const { return gather_output_; }

 private:
  bool gather_output_;
};

class RowParallelLinear : public ParallelLayer<nn::Linear> {
 public:
  RowParallelLinear(std::int64_t in_features, std::int64_t out_features, Communicator& tp,
                    bool input_is_parallel = false, ParallelLinearOptions options = {});
  static std::unique_ptr<RowParallelLinear> from_serial(const nn::Linear& serial, Communicator& tp,
                                                        bool input_is_parallel = false, const std::string& name = "",
                                                        std::optional<int> sequence_dim = std::nullopt);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "RowParallelLinear"; }
  bool input_is_parallel() const { return input_is_parallel_; }

 private:
  bool input_is_parallel_;
};

}  // namespace tessera::tp
