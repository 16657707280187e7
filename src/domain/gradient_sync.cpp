#include "tessera/domain/gradient_sync.hpp"

#include <limits>

#include "comm/flat_buckets.hpp"
#include "tessera/mesh.hpp"

namespace tessera::domain {

int sync_domain_gradients(nn::Module& module, const Mesh& mesh) { return sync_domain_gradients(module, mesh.domain()); }

int sync_domain_gradients(nn::Module& module, Communicator& comm) {
  // Parameters replicated over the domain, in the module's stable order (the same on
  // every rank, so the packed buffers line up).
  std::vector<Tensor> grads;
  for (auto& [name, p] : module.named_parameters()) {
    if (p->placement.domain.is_shard()) continue;  // its gradient is its own
    if (!p->trainable) continue;                   // frozen: no gradient to sum
    if (!p->grad.defined()) {
      throw InvalidArgument("sync_domain_gradients: parameter " + name + " has no gradient tensor");
    }
    grads.push_back(p->grad);
  }
  if (comm.size() == 1) return static_cast<int>(grads.size());
  // One bucket per dtype (and device): these gradients are small next to the fields.
  // SUM, not avg: each rank holds the gradient of its own part of the loss.
  tessera::detail::bucketed_in_place(grads, {}, std::numeric_limits<std::size_t>::max(),
                                     [&](Tensor& flat, int) { comm.all_reduce(flat, ReduceOp::sum); });
  return static_cast<int>(grads.size());
}

}  // namespace tessera::domain
