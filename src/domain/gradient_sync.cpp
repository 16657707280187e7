#include "tessera/domain/gradient_sync.hpp"

#include <map>

#include "tessera/mesh.hpp"

namespace tessera::domain {

int sync_domain_gradients(nn::Module& module, const Mesh& mesh) { return sync_domain_gradients(module, mesh.domain()); }

int sync_domain_gradients(nn::Module& module, Communicator& comm) {
  // Parameters replicated over the domain, grouped by dtype in the module's stable order
  // (the same on every rank, so the packed buffers line up).
  std::map<DType, std::vector<Parameter*>> groups;
  int count = 0;
  for (auto& [name, p] : module.named_parameters()) {
    if (p->placement.domain.is_shard()) continue;  // its gradient is its own
    if (!p->grad.defined()) {
      throw InvalidArgument("sync_domain_gradients: parameter " + name + " has no gradient tensor");
    }
    groups[p->grad.dtype()].push_back(p);
    ++count;
  }
  if (comm.size() == 1) return count;
  for (auto& [dtype, params] : groups) {
    std::int64_t total = 0;
    for (Parameter* p : params) total += p->grad.numel();
    Tensor flat = Tensor::empty({total}, dtype, params.front()->grad.device());
    std::int64_t offset = 0;
    for (Parameter* p : params) {
      flat.narrow(0, offset, p->grad.numel()).reshape(p->grad.shape()).copy_from(p->grad);
      offset += p->grad.numel();
    }
    // SUM, not avg: each rank holds the gradient of its own part of the loss.
    comm.all_reduce(flat, ReduceOp::sum);
    offset = 0;
    for (Parameter* p : params) {
      p->grad.copy_from(flat.narrow(0, offset, p->grad.numel()).reshape(p->grad.shape()));
      offset += p->grad.numel();
    }
  }
  return count;
}

}  // namespace tessera::domain
