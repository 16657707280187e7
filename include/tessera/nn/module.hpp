#pragma once
// Module: a layer with an explicit forward and backward, in a tree of named children.
//
// Classic explicit backprop: forward(x) caches what backward needs; backward(dy)
// *accumulates* parameter gradients (call zero_grad() between steps) and returns dx.
// One forward must precede each backward. Names are dotted fully-qualified names
// (`layers.1.mlp.proj_up.weight`), so plans, checkpoints and error messages all speak
// the same names.
//
// Modules are neither copyable nor movable (they register pointers to their own
// members); create them with std::make_unique and hold them by unique_ptr.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/activations.hpp"
#include "tessera/parameter.hpp"
#include "tessera/precision.hpp"
#include "tessera/tensor.hpp"

namespace tessera::nn {

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& input) = 0;
  virtual Tensor backward(const Tensor& grad_output) = 0;
  // The class name used in error messages and plans ("Linear", "ColumnParallelLinear").
  virtual std::string type_name() const = 0;

  // Parameters of this module and its descendants, in a stable order: own parameters in
  // registration order, then each child's in child order. Names are prefixed with
  // `prefix` + "." when a prefix is given.
  std::vector<std::pair<std::string, Parameter*>> named_parameters(const std::string& prefix = "");
  std::vector<Parameter*> parameters();
  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }
  // Direct child by name, or nullptr.
  Module* child(const std::string& name) const;
  void zero_grad();

  // ---- Paths into the tree (dotted FQNs relative to this module; "" is this module).
  // Every module of the tree, pre-order (this module first, named `prefix`).
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  // The module at `path`, or nullptr.
  Module* find(const std::string& path) const;
  // The module at `path`; InvalidArgument naming the path and the missing component.
  Module& at(const std::string& path) const;
  // Replaces the module at `path` (not "") in place and returns the old one; the
  // replacement takes the old one's compute precision. Parents
  // must reach their children through child()/at() at forward time — never through
  // pointers cached at construction — so a replaced child takes effect.
  std::unique_ptr<Module> replace(const std::string& path, std::unique_ptr<Module> replacement);

  // ---- Opt-in for apply_tensor_parallel (CREDIT's `_tp_col` / `_tp_row`): a block
  // that returns the dotted paths of its column- and row-parallel children is
  // converted in place.
  struct TensorParallelPaths {
    std::string column;
    std::string row;
  };
  virtual std::optional<TensorParallelPaths> tensor_parallel_paths() const { return std::nullopt; }

  // ---- Tied weights: dotted paths (relative to this module) of descendants' parameters
  // that this module reads itself, outside the descendant's own forward and backward (a
  // tied output head reading the embedding table). Data parallelism must know: it keeps
  // such a parameter whole on every dp rank (fsdp2 does not shard it) and averages its
  // gradient only once the whole backward is done (dp/data_parallel.hpp).
  virtual std::vector<std::string> tied_parameter_paths() const { return {}; }

  // ---- What forward caches for backward (nn/activations.hpp). A module that caches
  // tensors (or counts describing its last forward) overrides visit_activations to hand
  // each cached member to the visitor, then calls Module::visit_activations (its
  // children) or, for a wrapper whose inner module is not a child, the inner's. The
  // three operations below are built on it. All local, no communication.
  virtual void visit_activations(ActivationVisitor& visitor);
  // Drops every cache of the tree (activation checkpointing, nn/activation_checkpoint.hpp:
  // a checkpointed block keeps only its input and recomputes its forward before its
  // backward). A backward after a release is the layer's "without a preceding forward"
  // error; only memory depends on a release, never a result.
  void release_activations();
  // Moves every cache of the tree into a stash (the tree is left as after a release)
  // and puts a stash back (pipeline stages, pp/pipeline.hpp: a microbatch's caches wait
  // for its backward while other microbatches run their forwards). A stash restores
  // only into the tree it came from; one that does not fit is an InvalidArgument and
  // leaves the tree released.
  ActivationStash stash_activations();
  void restore_activations(ActivationStash&& stash);

  // ---- Numerics of the module's matrix products (tessera/precision.hpp). Sets the
  // precision of this module and of every module below it; a wrapper whose inner module
  // is not a child (activation checkpointing, data parallelism's units) forwards it, so
  // the call reaches every layer before or after wrapping. Local, no communication.
  // Layers with GEMMs pass compute_precision() to them; the others ignore it.
  virtual void set_compute_precision(Precision precision);
  Precision compute_precision() const { return precision_; }

  // Runs after initialize_parameters has drawn every parameter of the tree, for a layer
  // whose values have a rule beyond its InitSpec (an embedding's zero padding row). Local,
  // no communication.
  virtual void after_initialize() {}

 protected:
  // `parameter` must be a member of the derived module (it is referenced, not owned).
  void register_parameter(std::string name, Parameter& parameter);
  template <class M>
  M& register_child(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(std::move(name), std::move(module));
    return ref;
  }
  std::vector<std::pair<std::string, std::unique_ptr<Module>>>& mutable_children() { return children_; }

 private:
  std::vector<std::pair<std::string, Parameter*>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  Precision precision_ = Precision::fp32;
};

// Fills every parameter of `module` (named by its FQN under `prefix`) from its InitSpec,
// global shape and local offset — the same master values at every layout — then calls
// after_initialize() on every module of the tree.
void initialize_parameters(Module& module, std::uint64_t seed, const std::string& prefix = "");

}  // namespace tessera::nn
