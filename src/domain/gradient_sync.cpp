#include "tessera/domain/gradient_sync.hpp"

#include <limits>

#include "comm/flat_buckets.hpp"
#include "tessera/mesh.hpp"

namespace tessera::domain {

int sync_domain_gradients(nn::Module& module, const Mesh& mesh, DType reduce_dtype) {
  return sync_domain_gradients(module, mesh.domain(), reduce_dtype);
}

int sync_domain_gradients(nn::Module& module, Communicator& comm, DType reduce_dtype) {
  const char* who = "sync_domain_gradients";
  tessera::detail::check_reduce_dtype(reduce_dtype, who);
  // Parameters replicated over the domain, in the module's stable order (the same on
  // every rank, so the packed buffers line up).
  std::vector<Tensor> grads;
  for (auto& [name, p] : module.named_parameters()) {
    if (p->placement.domain.is_shard()) continue;  // its gradient is its own
    if (!p->trainable) continue;                   // frozen: no gradient to sum
    if (!p->grad.defined()) {
      throw InvalidArgument("sync_domain_gradients: parameter " + name + " has no gradient tensor");
    }
    tessera::detail::check_reducible(p->grad, reduce_dtype, who, name);
    grads.push_back(p->grad);
  }
  if (comm.size() == 1) return static_cast<int>(grads.size());
  // One bucket per dtype (and device): these gradients are small next to the fields.
  // SUM, not avg: each rank holds the gradient of its own part of the loss.
  tessera::detail::bucketed_all_reduce(comm, grads, std::vector<ReduceOp>(grads.size(), ReduceOp::sum),
                                       std::numeric_limits<std::size_t>::max(), reduce_dtype);
  return static_cast<int>(grads.size());
}

}  // namespace tessera::domain
