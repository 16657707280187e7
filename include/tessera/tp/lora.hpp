#pragma once
// LoRA (low-rank adaptation, Hu et al. 2021; the seed's `lora_rank` on the parallel
// linears) for nn::Linear, ColumnParallelLinear and RowParallelLinear.
//
// LoraLinear wraps a base linear layer: y = base(x) + (alpha / rank) · (x Aᵀ) Bᵀ, with
// A [rank, in] and B [out, rank] trainable and every base parameter frozen
// (Parameter::trainable = false; the weight's gradient is released, so the base layer
// skips its dW product). Dropout on the adapter input is not supported (0 only).
//
// Names. The wrapper registers the base's parameters under their own names ("weight",
// "bias"), so their FQNs do not change, and the adapters as "lora_A.weight" and
// "lora_B.weight" (peft's names): `layers.0.attn.q.weight` keeps its name and gains
// `layers.0.attn.q.lora_A.weight` / `.lora_B.weight`, each its own checkpoint dataset.
//
// Sharding follows the base layer, so no adapter tensor is ever as large as the base's:
//   column (weight Shard(0), input replicated): A replicated over tp, B Shard(0) like the
//     weight. u = x Aᵀ is computed redundantly on every rank (rank-sized), each rank adds
//     its out/tp rows u B_localᵀ; with gather_output the delta is all-gathered with the
//     base output. Backward sums u's gradient over tp (an all-reduce of [..., rank],
//     not of [..., in]), so A's gradient is complete and identical on every rank.
//   row (weight Shard(1), input sharded on features): A Shard(1) like the weight, B
//     replicated. The partial u = x_local A_localᵀ is summed over tp by its own
//     all-reduce of [..., rank] — rank / out of the base's all-reduce, and keeping it
//     separate leaves the base layer untouched — then every rank adds u Bᵀ. With a
//     replicated input (input_is_parallel = false) the input gradient of the adapter
//     path is all-gathered like the base's.
// The master A and B are the same at every tp layout: A and B carry their InitSpec
// (A: kaiming_uniform(a = sqrt(5)), B: zeros, as peft), drawn by name and global index
// like every parameter (init.hpp), so a model converted at tp 1, 2 or 4 starts from the
// same adapters, and checkpoints reshard them like any parameter.
//
// Not supported (UnsupportedError naming the layer): strided (stride > 1) or
// sequence-parallel (sequence_dim) bases, and convolutions.
//
// Order with parallelize: add LoRA after tp::parallelize, or — when LoRA was added to the
// serial model — convert with parallelize_with_lora (plain tp::parallelize rejects a
// LoraLinear: it is not a Linear).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::tp {

struct LoraOptions {
  std::int64_t rank = 8;   // r >= 1
  double alpha = 8.0;      // the delta is scaled by alpha / rank (peft's lora_alpha)
  double dropout = 0.0;    // must be 0
  std::optional<InitSpec> a_init;  // default: kaiming_uniform(a = sqrt(5)) on [rank, in]
  std::optional<InitSpec> b_init;  // default: zeros
};

class LoraLinear : public nn::Module {
 public:
  // `base` is an nn::Linear (tp unused; pass nullptr), a ColumnParallelLinear or a
  // RowParallelLinear (tp: the group it was built on). The adapters start at zero; fill
  // them with initialize_adapters() or nn::initialize_parameters. `name` (the FQN) is
  // used in errors.
  LoraLinear(std::unique_ptr<nn::Module> base, Communicator* tp, LoraOptions options, const std::string& name = "");

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "LoraLinear"; }
  void visit_activations(nn::ActivationVisitor& v) override;  // its caches and the base's (held, not a child)
  void set_compute_precision(Precision precision) override;  // its own and the base's

  // Fills A and B from their InitSpecs, keyed by `<fqn>.lora_A.weight` / `.lora_B.weight`
  // (the names nn::initialize_parameters would use for this layer at path `fqn`).
  void initialize_adapters(std::uint64_t seed, const std::string& fqn);

  // This rank's block of base + (alpha / rank) · B A: the block of the merged master
  // weight that the base weight holds (no communication).
  Tensor merged_weight() const;
  // Collective over tp: the master A [rank, in] and B [out, rank].
  Tensor master_a();
  Tensor master_b();

  // Releases the base layer (for merge_lora and parallelize_with_lora); the wrapper is
  // then unusable. The base's parameters are left frozen.
  std::unique_ptr<nn::Module> release_base();
  nn::Module& base() { return *base_; }
  Parameter& base_weight() { return *base_weight_; }

  enum class Kind { serial, column, row };
  Kind kind() const { return kind_; }
  std::int64_t rank() const { return options_.rank; }
  double alpha() const { return options_.alpha; }
  double scale() const { return options_.alpha / static_cast<double>(options_.rank); }
  const LoraOptions& options() const { return options_; }

  Parameter lora_a, lora_b;

 private:
  std::unique_ptr<nn::Module> base_;
  Communicator* tp_;
  LoraOptions options_;
  Kind kind_;
  Parameter* base_weight_;
  std::int64_t in_, out_;
  bool gather_output_ = false, input_is_parallel_ = true;  // column / row options of the base
  std::string label_;
  Tensor input_, scaled_u_;  // saved for backward: the adapter's input (local) and scale · x Aᵀ
};

// Wraps every Linear, ColumnParallelLinear or RowParallelLinear whose FQN matches one of
// `patterns` (fqn_matches' syntax, relative to `model`) in a LoraLinear and initialises
// its adapters with `seed` (A and B only: the base, usually pretrained, is untouched).
// `prefix`: the FQN of `model` inside a larger tree, so the adapters' init keys are their
// full names. A pattern that matches nothing, or matches another module type, is an
// InvalidArgument naming it. Returns the wrapped FQNs. `tp` may be nullptr when only
// serial Linears match.
std::vector<std::string> add_lora(nn::Module& model, const std::vector<std::string>& patterns,
                                  const LoraOptions& options, Communicator* tp, std::uint64_t seed,
                                  const std::string& prefix = "");

// Merges every LoraLinear of `model` into its base (weight += alpha / rank · B A, per
// shard) and puts the base back in its place, trainable again: the model is then a plain
// model whose checkpoint loads as one. Returns the merged FQNs.
std::vector<std::string> merge_lora(nn::Module& model);

// Whether `fqn` names a LoRA adapter ("....lora_A.weight" / "....lora_B.weight"): a
// pretrained base checkpoint holds everything but these.
bool is_lora_adapter(const std::string& fqn);

// tp::parallelize for a serial model that already holds LoraLinears over nn::Linear:
// each is unwrapped, the plan converts the bases (a plan entry may name the LoRA path
// or a parent, e.g. Pairwise), and each is wrapped again around its converted base with
// A and B sharded from their masters (a base the plan left serial stays serial).
void parallelize_with_lora(nn::Module& model, Communicator& tp, const ParallelizePlan& plan);

}  // namespace tessera::tp
