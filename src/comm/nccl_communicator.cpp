// libtessera's side of the NCCL communicator (see nccl_communicator.hpp): whether CUDA
// tensors use NCCL, and the group's communicator, made by the CUDA plugin, which alone
// links NCCL (its implementation is nccl_communicator_impl.cpp).

#include "comm/nccl_communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda_plugin.hpp"
#include "tessera/error.hpp"
#include "tessera/version.hpp"

namespace tessera::detail {

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(MPI_Comm comm, int rank, int size, int device) {
  const CudaPlugin& plugin = cuda_plugin();
  if (plugin.create_nccl == nullptr) {
    throw UnsupportedError("NCCL communicators need NCCL; tessera was built without it (TESSERA_HAVE_NCCL 0)");
  }
  return plugin.create_nccl(comm, rank, size, device);
}

bool nccl_enabled() {
  if (!TESSERA_HAVE_NCCL) return false;  // CUDA tensors' collectives take MPI
  // Like TESSERA_MPI_CUDA_AWARE: 0 or 1, anything else is an error naming the variable.
  const char* value = std::getenv("TESSERA_NCCL");
  if (value == nullptr || std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  throw ConfigError(std::string("TESSERA_NCCL=\"") + value + "\": expected 0 or 1");
}

}  // namespace tessera::detail
