// Shared-GPU detection (device_sharing.hpp). The UUID query is the one CUDA call here
// (made by the CUDA plugin); the comparison is plain C++ that the host tests exercise.

#include "comm/device_sharing.hpp"

#include <map>

#include "backend/cuda_plugin.hpp"

namespace tessera::detail {

SharedDevice first_shared_device(const std::vector<std::string>& uuids) {
  std::map<std::string, int> first_rank_of;
  for (int rank = 0; rank < static_cast<int>(uuids.size()); ++rank) {
    const auto [it, inserted] = first_rank_of.emplace(uuids[static_cast<std::size_t>(rank)], rank);
    if (!inserted) return {it->second, rank};
  }
  return {};
}

// The query runs in the CUDA plugin, which alone links the CUDA runtime.
std::string cuda_device_uuid(int device) { return cuda_plugin().device_uuid(device); }

}  // namespace tessera::detail
