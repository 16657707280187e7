// The CUDA plugin's one entry point (backend/cuda_plugin.hpp): the table through which
// libtessera reaches the CUDA backend, the device queries and the NCCL communicator.

#include "backend/cuda_plugin.hpp"
#include "comm/nccl_communicator.hpp"
#include "tessera/version.hpp"

extern "C" __attribute__((visibility("default"))) const tessera::detail::CudaPlugin* tessera_cuda_plugin() {
  using namespace tessera::detail;
  static const CudaPlugin plugin{
      TESSERA_VERSION_STRING,
      &cuda_backend_instance,
      &cuda_runtime_device_count,
      &cuda_runtime_unavailable_reason,
      &cuda_runtime_library_versions,
      &cuda_runtime_device_uuid,
#if TESSERA_HAVE_NCCL
      &create_nccl_communicator,
#else
      nullptr,
#endif
  };
  return &plugin;
}
