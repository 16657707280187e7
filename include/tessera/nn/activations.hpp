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
// restores into the same tree only. A module without children that caches nothing
// overrides visit_activations with an empty body; one that does not override it is
// "unlisted", and a stash refuses it rather than leave its caches to the next forward.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::nn {

class Module;

class ActivationVisitor {
 public:
  virtual ~ActivationVisitor() = default;
  // A cached tensor (undefined when nothing is cached).
  virtual void tensor(Tensor& cached) = 0;
  // A cached count that describes the last forward (heads seen, an extent scattered).
  virtual void count(std::int64_t& cached) = 0;
  // A module without children that does not list its caches (it did not override
  // Module::visit_activations): it may cache members no visitor can see. Release keeps
  // them (memory, never a result); a stash cannot move them, so it refuses the module.
  virtual void unlisted(const Module& leaf) = 0;
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

// InvalidArgument naming `path` and the module's type unless every module of the tree
// lists its caches (no unlisted leaf), so a stash of it cannot miss one. Local; a
// pipeline checks its stage this way, agreed over the mesh, before its first step.
void require_stashable(Module& module, const std::string& path);

}  // namespace tessera::nn
