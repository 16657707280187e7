// Shared-GPU detection (device_sharing.hpp). The UUID query is the one CUDA call here;
// the comparison is plain C++ that the host tests exercise.

#include "comm/device_sharing.hpp"

#include <map>

#include "tessera/error.hpp"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/cuda_check.hpp"
#endif

namespace tessera::detail {

SharedDevice first_shared_device(const std::vector<std::string>& uuids) {
  std::map<std::string, int> first_rank_of;
  for (int rank = 0; rank < static_cast<int>(uuids.size()); ++rank) {
    const auto [it, inserted] = first_rank_of.emplace(uuids[static_cast<std::size_t>(rank)], rank);
    if (!inserted) return {it->second, rank};
  }
  return {};
}

#if defined(TESSERA_WITH_CUDA)
std::string cuda_device_uuid(int device) {
  cudaDeviceProp properties{};
  TESSERA_CHECK_CUDA(cudaGetDeviceProperties(&properties, device));
  std::string hex;
  for (unsigned char byte : properties.uuid.bytes) {
    char digits[3];
    std::snprintf(digits, sizeof(digits), "%02x", byte);
    hex += digits;
  }
  return hex;
}
#else
std::string cuda_device_uuid(int) {
  throw UnsupportedError("cuda_device_uuid: tessera was built without the CUDA backend");
}
#endif

}  // namespace tessera::detail
