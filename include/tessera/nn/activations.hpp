#pragma once
// What a module's forward keeps for its backward, seen from outside the module.
//
// A tessera Module caches the state of its last forward in its own members (the input
// of a Linear, the mean and rstd of a LayerNorm). Three things need to reach that state
// without knowing the layer: activation checkpointing drops it (release), and a
// pipeline stage that runs several microbatches' forwards before their backwards moves
// it aside after one forward and puts it back before that microbatch's backward (stash
// and restore), instead of recomputing the forward.
//
// One mechanism serves all three: every module that caches lists its cached members to
// an ActivationVisitor (Module::visit_activations); release, stash and restore are
// visitors. The visiting order is the module tree's, so a stash taken from one tree
// restores into the same tree only.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::nn {

class ActivationVisitor {
 public:
  virtual ~ActivationVisitor() = default;
  // A cached tensor (undefined when nothing is cached).
  virtual void tensor(Tensor& cached) = 0;
  // A cached count that describes the last forward (heads seen, an extent scattered).
  virtual void count(std::int64_t& cached) = 0;
};

// The caches of one forward, moved out of a module tree (Module::stash_activations) and
// back into it (Module::restore_activations). Holds the tensors by handle: no copy.
class ActivationStash {
 public:
  bool empty() const { return tensors_.empty() && counts_.empty(); }
  std::size_t tensor_count() const { return tensors_.size(); }

 private:
  friend class StashVisitor;
  friend class RestoreVisitor;
  std::vector<Tensor> tensors_;
  std::vector<std::int64_t> counts_;
};

}  // namespace tessera::nn
