#pragma once
// Activation checkpointing: trading compute for memory (not io/checkpoint.hpp's files).
//
// ActivationCheckpoint wraps a block. Its forward runs the block, keeps only the block's
// input and drops everything the block cached for backward (Module::release_activations);
// its backward first runs the block's forward again on that input, which refills the
// caches, and then the block's backward. The recompute is the same computation on the same
// values, so gradients are bit-identical to the run without checkpointing; the cost is one
// more forward of the block per step. Between forward and backward a checkpointed block
// holds one tensor (its input) instead of its internal activations; during backward one
// block's activations are alive at a time.
//
// The wrapper registers the block's parameters directly (not the block as a child), so
// FQNs do not change: checkpoints, plans and optimizers see the same names. The block's
// modules are then no longer visible to at()/named_modules(): checkpoint after tensor and
// domain parallelism have converted the model (tp::parallelize, apply_tensor_parallel),
// and after nn::initialize_parameters (the wrapper passes after_initialize and the
// block's tied_parameter_paths through, for a tree initialised or wrapped later).
//
// Data parallelism (dp::DataParallel): checkpoint *before* wrapping the model. A
// checkpointed block registers parameters itself, so it becomes one data-parallel unit:
// fsdp2 gathers the whole block before its forward and again before its backward (the
// recompute and the backward share that gather), and overlapped ddp starts its buckets as
// the blocks' backward passes finish, as without checkpointing. Checkpointing a block
// whose leaves DataParallel already wrapped also gives the same results, but its leaves'
// forwards then run twice per step, once more than their backward: the engine defers
// their reductions to finish_gradient_sync(), which costs the overlap (and fsdp2 gathers
// each leaf three times a step instead of twice).
//
// Every process of a tensor-, domain- or data-parallel group must checkpoint the same
// blocks: the recompute repeats the block's collectives.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

class ActivationCheckpoint : public Module {
 public:
  explicit ActivationCheckpoint(std::unique_ptr<Module> inner);

  // y = inner.forward(x); keeps x, releases inner's activations.
  Tensor forward(const Tensor& input) override;
  // Recomputes inner.forward(x), then returns inner.backward(dy). InvalidArgument without
  // a preceding forward.
  Tensor backward(const Tensor& grad_output) override;
  // "Checkpointed(TransformerBlock)".
  std::string type_name() const override;
  // The kept input, and whatever inner still caches.
  void visit_activations(ActivationVisitor& v) override;  // its input, then the block's
  std::vector<std::string> tied_parameter_paths() const override;
  void after_initialize() override;
  void set_compute_precision(Precision precision) override;  // this wrapper's and inner's

  Module& inner() { return *inner_; }
  // Gives the block back (the wrapper is unusable afterwards).
  std::unique_ptr<Module> release_inner();

 private:
  std::unique_ptr<Module> inner_;
  Tensor input_;  // forward's input, until backward recomputes from it
};

// Which blocks of a model's stack are checkpointed: none (every = 0), every block
// (every = 1, the config value `blocks`) or every N-th block (`every N`: blocks N-1,
// 2N-1, ..., so the last of each group of N recomputes).
struct CheckpointPolicy {
  std::int64_t every = 0;

  bool enabled() const { return every > 0; }
  bool selects(std::int64_t block) const { return every > 0 && (block + 1) % every == 0; }
  // How many of `blocks` blocks are checkpointed.
  std::int64_t count(std::int64_t blocks) const { return every > 0 ? blocks / every : 0; }
  // "none", "blocks" or "every 2" (what parse reads back).
  std::string str() const;
  // "none" | "blocks" | "every N" (N >= 1). ConfigError naming `key` otherwise.
  static CheckpointPolicy parse(std::string_view text, std::string_view key);
};

// Wraps the children of the module at `stack` (a Sequential of blocks: "layers",
// "blocks") that `policy` selects in ActivationCheckpoints, in place. Returns their
// paths. InvalidArgument naming the path when there is no module there, or when a
// selected block is already checkpointed.
std::vector<std::string> checkpoint_blocks(Module& model, const std::string& stack, const CheckpointPolicy& policy);

}  // namespace tessera::nn
