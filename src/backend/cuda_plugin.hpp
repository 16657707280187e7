#pragma once
// Private: the CUDA backend as a plugin. libtessera links no CUDA, cuBLAS or NCCL library;
// the CUDA backend, its compute implementation, the device queries and the NCCL
// communicator live in libtessera_cuda.so, which libtessera dlopens on the first request
// for a CUDA device (a CUDA tensor, cuda_device_count(), a Mesh on Device::cuda(), a
// collective on a CUDA tensor). A CPU-only program therefore maps no CUDA library and
// starts as fast as one linked against a build without CUDA.
//
// The plugin exports one C entry point, tessera_cuda_plugin(), returning the table below;
// everything CUDA that libtessera reaches goes through it (backend_for, the public
// cuda_* queries, device_sharing's UUID query, NcclCommunicator::create). The table holds
// C++ types: the plugin and libtessera come from the same build, which `version` checks.
//
// Where the plugin is found: $TESSERA_CUDA_PLUGIN when set (a path), otherwise
// libtessera_cuda.so in the directory libtessera was loaded from (the build tree's lib/,
// or the install prefix's lib/), otherwise the dynamic loader's search (libtessera's
// RUNPATH, LD_LIBRARY_PATH). A static libtessera has the plugin's objects linked in.

#include <mpi.h>

#include <memory>
#include <string>

namespace tessera {
class Backend;
}

namespace tessera::detail {

class NcclCommunicator;

struct CudaPlugin {
  // TESSERA_VERSION_STRING of the build that made the plugin; libtessera refuses another.
  const char* version;
  // The CUDA backend singleton (memory, copies, CudaCompute).
  Backend& (*backend)();
  // cudaGetDeviceCount; 0 on any failure (never throws).
  int (*device_count)() noexcept;
  // Why device_count() is 0 ("cudaGetDeviceCount: ..."); empty when devices exist.
  std::string (*unavailable_reason)();
  // "CUDA runtime 13.0, driver ..., cuBLAS ..., NCCL ..."; never throws.
  std::string (*library_versions)();
  // The device's UUID as 32 hex digits (throws CudaError).
  std::string (*device_uuid)(int device);
  // The NCCL communicator of a group (nccl_communicator.hpp); null when the plugin was
  // built without NCCL.
  std::shared_ptr<NcclCommunicator> (*create_nccl)(MPI_Comm comm, int rank, int size, int device);
};

// The loaded plugin's table, loaded on the first call (thread-safe; the outcome, success
// or failure, is kept for the process). Throws UnsupportedError naming the file and the
// loader's message when it cannot be loaded, or saying the build has no CUDA backend.
const CudaPlugin& cuda_plugin();

// The plugin side (backend/cuda/cuda_plugin_entry.cpp) of the table's entries.
Backend& cuda_backend_instance();
int cuda_runtime_device_count() noexcept;
std::string cuda_runtime_unavailable_reason();
std::string cuda_runtime_library_versions();
std::string cuda_runtime_device_uuid(int device);

}  // namespace tessera::detail

// The plugin's one exported symbol (looked up by this name with dlsym).
extern "C" const tessera::detail::CudaPlugin* tessera_cuda_plugin();
