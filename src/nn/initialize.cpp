// nn::initialize_parameters: every parameter from its own InitSpec, named by its FQN,
// so the master values depend only on (seed, name, global index), never on the layout.

#include "tessera/init.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::nn {

void initialize_parameters(Module& module, std::uint64_t seed, const std::string& prefix) {
  for (auto& [fqn, p] : module.named_parameters(prefix)) {
    initialize(p->value, p->global_shape, p->local_offset, p->init, seed, fqn);
  }
  for (auto& [path, m] : module.named_modules()) m->after_initialize();
}

}  // namespace tessera::nn
