#pragma once
// Converting a serial model into a tensor-parallel one, in place.
//
// parallelize(model, tp, plan) follows PyTorch's parallelize_module: a plan maps FQN
// patterns to styles. A pattern is a dotted path whose components may contain `*`
// (matching any characters within one component): "layers.*.attn.q", "layers.1.mlp".
// Styles, and the layouts of the tensors a styled module consumes and produces (the
// seed's make_input_* / make_output_* preparation; functions of those names below):
//
//   Colwise            Linear -> ColumnParallelLinear, Conv2d -> ColumnParallelConv2d,
//                      Embedding -> ParallelEmbedding (embeddings always take
//                      replicated ids and return a replicated output).
//                      input:  Replicate, or Shard(sequence / any dim) (all-gathered first)
//                      output: Shard(features) (default), Replicate (all-gathered), or
//                              Shard(dim) (all-gathered, then split along dim)
//   Rowwise            Linear -> RowParallelLinear, Conv2d -> RowParallelConv2d,
//                      Embedding -> VocabParallelEmbedding.
//                      input:  Shard(features) (default), Replicate (split here), or
//                              Shard(dim) (all-gathered along dim, then split here)
//                      output: Replicate (all-reduce), or Shard(sequence / any dim,
//                              features included) (reduce-scatter along it)
//                      (Layouts other than the defaults apply to Linear layers; the
//                      seed's make_input_* / make_output_* below name them.)
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
// buckets of at most `bucket_bytes` (one all-reduce per bucket), in `reduce_dtype`:
// f32 (default) reduces every gradient in its own dtype; bf16 rounds f32 gradients to
// bf16 for the all-reduce and widens the result back (half the bytes; an average is
// taken in f32; comm/flat_buckets.hpp). A reduce dtype other than f32/bf16, or an f64
// gradient with bf16, is an InvalidArgument naming it, on every rank alike.

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/nn/module.hpp"

namespace tessera {
class Mesh;
}

namespace tessera::tp {

// shard_sequence is "sharded along a dim other than the features": the sequence of
// (B, S, D) activations by default (ParallelStyle::sequence_dim), or the dim a Prepare
// names (0 for the seed's "reshard" preparations; negative dims count from the end).
enum class Layout { replicate, shard_features, shard_sequence };
std::string_view layout_name(Layout layout) noexcept;

// The seed's input/output preparation functions, as the layout a styled module's input
// arrives in and its output leaves in. Tensors here are always a rank's local tensor (no
// DTensor), so the seed's "tensor" and "DTensor" variants of one layout coincide:
//   make_input_replicate_1d()        Replicate
//   make_input_shard_1d(dim = 0)     Shard(dim) (dim -1: Shard(features))
//   make_input_shard_1d_last_dim()   Shard(features)
//   make_input_reshard_replicate()   Shard(0) pieces that the module needs whole: all-gathered
//                                    along dim 0 (the same as make_input_shard_1d(0))
//   make_output_replicate_1d(), make_output_tensor()   Replicate
//   make_sharded_output_tensor()     Shard(features) (Colwise's default)
//   make_output_shard_1d(dim = 0)    Shard(dim) (dim -1: Shard(features))
//   make_output_reshard_tensor()     Shard(0)
// The styles accept (Linear layers; embeddings and convs keep their fixed layouts):
//   Colwise  input  Replicate, or Shard(any dim): all-gathered first (its gradient
//                   reduce-scattered back);
//            output Shard(features); Replicate (all-gathered); Shard(dim): all-gathered,
//                   then this rank's block of dim (its gradient all-gathered back).
//   Rowwise  input  Shard(features); Replicate (this rank's features taken here);
//                   Shard(dim): all-gathered along dim first, then as Replicate;
//            output Replicate (all-reduce); Shard(any dim, features included):
//                   reduce-scatter along it.
struct Prepare {
  Layout layout = Layout::replicate;
  std::optional<int> dim;  // shard_sequence only: the sharded dim
};
Prepare make_input_replicate_1d();
Prepare make_input_shard_1d(int dim = 0);
Prepare make_input_shard_1d_last_dim();
Prepare make_input_reshard_replicate();
Prepare make_output_replicate_1d();
Prepare make_output_tensor();
Prepare make_sharded_output_tensor();
Prepare make_output_shard_1d(int dim = 0);
Prepare make_output_reshard_tensor();

struct ParallelStyle {
  enum class Kind { colwise, rowwise, pairwise, sequence_parallel, replicate };
  Kind kind = Kind::replicate;
  Layout input = Layout::replicate;
  Layout output = Layout::replicate;
  int sequence_dim = 1;  // (B, S, D) activations
  // The sharded dim of a shard_sequence input/output when it is not sequence_dim.
  std::optional<int> input_dim, output_dim;

  int input_shard_dim() const { return input_dim.value_or(sequence_dim); }
  int output_shard_dim() const { return output_dim.value_or(sequence_dim); }

  static ParallelStyle colwise(Layout input = Layout::replicate, Layout output = Layout::shard_features);
  static ParallelStyle rowwise(Layout input = Layout::shard_features, Layout output = Layout::replicate);
  // The seed's spelling: ColwiseParallel(_prepare_input, _prepare_output).
  static ParallelStyle colwise(Prepare input, Prepare output = make_sharded_output_tensor());
  static ParallelStyle rowwise(Prepare input, Prepare output = make_output_tensor());
  static ParallelStyle pairwise();
  static ParallelStyle sequence_parallel(Layout input = Layout::shard_sequence);
  static ParallelStyle replicated(Layout output = Layout::replicate);
  std::string str() const;  // "Colwise(input=Replicate, output=Shard(features))", "...Shard(dim 0)"
};

using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

// Whether `path` matches `pattern` (dotted components; `*` within a component).
bool fqn_matches(const std::string& pattern, const std::string& path);

void parallelize(nn::Module& model, Communicator& tp, const ParallelizePlan& plan);
void parallelize(nn::Module& model, const Mesh& mesh, const ParallelizePlan& plan);  // over mesh.tp()
void apply_tensor_parallel(nn::Module& model, Communicator& tp);
void apply_tensor_parallel(nn::Module& model, const Mesh& mesh);
void sync_replicated_gradients(nn::Module& model, Communicator& tp, std::size_t bucket_bytes = std::size_t(25) << 20,
                               DType reduce_dtype = DType::f32);
void sync_replicated_gradients(nn::Module& model, Communicator& tp, DType reduce_dtype);  // 25 MiB buckets

// How a LayoutWrapper moves a tensor between layouts along one dim:
//   split   keep this rank's block (backward: all-gather the gradient);
//   gather  all-gather the ranks' blocks (backward: keep this rank's block of the gradient,
//           which is whole and identical on every rank).
enum class Redistribute { none, split, gather };

// The wrapper that prepares a leaf module's input and output: the same parameters under
// the same names (registered directly, not as a child, so FQNs do not change), its input
// and output redistributed along their dims. Sequence parallelism uses it to split a
// replicated input (a norm on sequence shards; with `partial_grads` the parameters'
// gradients are marked as partial sums over tp) or the output of a module whose
// consumers expect shards; plans use it for the preparations a layer does not do itself.
class LayoutWrapper : public nn::Module {
 public:
  LayoutWrapper(std::unique_ptr<nn::Module> inner, Communicator& tp, Redistribute input, int input_dim,
                Redistribute output, int output_dim, bool partial_grads);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  // "SequenceParallel(RMSNorm)" (partial gradients), "SequenceSharded(Embedding)" (output
  // split only), else "Prepared(RowParallelLinear)".
  std::string type_name() const override;
  void visit_activations(nn::ActivationVisitor& v) override { inner_->visit_activations(v); }
  void set_compute_precision(Precision precision) override {
    nn::Module::set_compute_precision(precision);
    inner_->set_compute_precision(precision);
  }
  nn::Module& inner() { return *inner_; }

 private:
  std::unique_ptr<nn::Module> inner_;
  Communicator& tp_;
  Redistribute input_, output_;
  int input_dim_, output_dim_;
  std::int64_t input_extent_ = 0, output_extent_ = 0;  // the whole extent a split split
  bool partial_grads_;
};

}  // namespace tessera::tp
