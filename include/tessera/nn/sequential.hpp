#pragma once
// Sequential: children named "0", "1", ... run in order; backward runs them in reverse,
// so parameter FQNs are "0.weight", "2.bias", ... as in PyTorch's nn.Sequential.

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

class Sequential : public Module {
 public:
  Sequential() = default;

  // Appends `module` as child str(size()) and returns it (typed, for further setup).
  // A null module is an InvalidArgument.
  template <class M>
  M& append(std::unique_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "Sequential::append takes a Module");
    check_appendable(module.get());
    return register_child(std::to_string(size()), std::move(module));
  }

  std::size_t size() const { return children().size(); }
  // Child i; InvalidArgument when i >= size().
  Module& operator[](std::size_t i) const;

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "Sequential"; }
  // Its children's caches; an empty Sequential caches nothing (and is no unlisted leaf).
  void visit_activations(ActivationVisitor& v) override {
    for (const auto& [name, child] : children()) child->visit_activations(v);
  }

 private:
  void check_appendable(const Module* module) const;
};

}  // namespace tessera::nn
