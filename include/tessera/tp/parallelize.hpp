#pragma once
// Converting a serial model into a tensor-parallel one, in place.
//
// parallelize(model, tp, plan) follows PyTorch's parallelize_module: a plan maps FQN
// patterns to styles. A pattern is a dotted path whose components may contain `*`
// (matching any characters within one component): "layers.*.attn.q", "layers.1.mlp".
// Styles, and the layouts of the tensors a styled module consumes and produces (the
// seed's make_input_* / make_output_* preparation, fixed per style here):
//
//   Colwise            Linear -> ColumnParallelLinear, Conv2d -> ColumnParallelConv2d,
//                      Embedding -> ParallelEmbedding (embeddings always take
//                      replicated ids and return a replicated output).
//                      input:  Replicate, or Shard(sequence) (all-gathered first)
//                      output: Shard(features) (default) or Replicate (all-gathered)
//   Rowwise            Linear -> RowParallelLinear, Conv2d -> RowParallelConv2d,
//                      Embedding -> VocabParallelEmbedding.
//                      input:  Shard(features) (default) or Replicate (split here)
//                      output: Replicate (all-reduce), or Shard(sequence) (reduce-scatter)
//   Pairwise           a module whose direct children include an even number (>= 2) of
//                      Linear layers: they become (Colwise, Rowwise) pairs in order,
//                      as Megatron-LM's MLP (input and output Replicate).
//   SequenceParallel   a norm (RMSNorm, LayerNorm) on sequence shards; input Shard
//                      (sequence) or Replicate (split here: the Replicate -> Shard
//                      transition after a replicated embedding); output Shard(sequence).
//                      Its weight gradients become partial sums over tp.
//   Replicate          the module stays as it is (its parameters are tp-replicated);
//                      with output Shard(sequence) its output is split along the
//                      sequence (no communication forward, an all-gather backward):
//                      the Replicate -> Shard transition of sequence parallelism, put
//                      right after a replicated token embedding so that the residual
//                      stream of the first block is already sharded.
//
// A pattern that matches nothing, or a style on a module type it cannot shard, is an
// InvalidArgument naming both. Converted layers keep their parameter FQNs, so
// initialisation, checkpoints and optimizers see the same names as the serial model.
//
// apply_tensor_parallel(model, tp) is CREDIT's opt-in conversion: every module whose
// tensor_parallel_paths() names a column and a row child (dotted paths allowed) gets
// them converted in place (column: output Shard(features); row: input Shard(features),
// output Replicate). Supported: Linear and Conv2d (any kernel, stride, padding, dilation).
//
// sync_replicated_gradients(model, tp) averages the gradients of tp-replicated
// parameters over tp — pinning replicas that drift under nondeterministic kernels or
// data = none — and sums the partial gradients sequence parallelism leaves on norm
// weights and row biases. Sharded parameters are untouched. Gradients travel in
// buckets of at most `bucket_bytes` (one all-reduce per bucket).

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/nn/module.hpp"

namespace tessera {
class Mesh;
}

namespace tessera::tp {

enum class Layout { replicate, shard_features, shard_sequence };
std::string_view layout_name(Layout layout) noexcept;

struct ParallelStyle {
  enum class Kind { colwise, rowwise, pairwise, sequence_parallel, replicate };
  Kind kind = Kind::replicate;
  Layout input = Layout::replicate;
  Layout output = Layout::replicate;
  int sequence_dim = 1;  // (B, S, D) activations

  static ParallelStyle colwise(Layout input = Layout::replicate, Layout output = Layout::shard_features);
  static ParallelStyle rowwise(Layout input = Layout::shard_features, Layout output = Layout::replicate);
  static ParallelStyle pairwise();
  static ParallelStyle sequence_parallel(Layout input = Layout::shard_sequence);
  static ParallelStyle replicated(Layout output = Layout::replicate);
  std::string str() const;  // "Colwise(input=Replicate, output=Shard(features))"
};

using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

// Whether `path` matches `pattern` (dotted components; `*` within a component).
bool fqn_matches(const std::string& pattern, const std::string& path);

void parallelize(nn::Module& model, Communicator& tp, const ParallelizePlan& plan);
void parallelize(nn::Module& model, const Mesh& mesh, const ParallelizePlan& plan);  // over mesh.tp()
void apply_tensor_parallel(nn::Module& model, Communicator& tp);
void apply_tensor_parallel(nn::Module& model, const Mesh& mesh);
void sync_replicated_gradients(nn::Module& model, Communicator& tp, std::size_t bucket_bytes = std::size_t(25) << 20);

// The wrapper sequence parallelism puts around a leaf module: the same parameters
// under the same names (registered directly, not as a child, so FQNs do not change);
// the input split along the sequence when it arrives replicated, or the output split
// when the module's consumers expect shards; with `partial_grads` (norms on sequence
// shards) the parameters' gradients are marked as partial sums over tp.
class SequenceShardWrapper : public nn::Module {
 public:
  SequenceShardWrapper(std::unique_ptr<nn::Module> inner, Communicator& tp, int sequence_dim, bool split_input,
                       bool split_output, bool partial_grads);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override;
  nn::Module& inner() { return *inner_; }

 private:
  std::unique_ptr<nn::Module> inner_;
  Communicator& tp_;
  int sequence_dim_;
  bool split_input_, split_output_, partial_grads_;
};

}  // namespace tessera::tp
