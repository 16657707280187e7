// The CUDA compute singleton and its entries that launch no kernel: pinned staging
// memory, stream synchronisation, the allocator's cache and the pointer query behind
// Backend::require_usable (host twin: host_compute.cpp).

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_runtime.hpp"

namespace tessera::detail {

void* CudaCompute::allocate_pinned(std::size_t bytes) {
  void* ptr = nullptr;
  if (bytes == 0) return nullptr;
  TESSERA_CHECK_CUDA(cudaMallocHost(&ptr, bytes));
  return ptr;
}

void CudaCompute::free_pinned(void* ptr) noexcept {
  if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

void CudaCompute::synchronize_stream(int device) {
  DeviceGuard guard(device);
  TESSERA_CHECK_CUDA(cudaStreamSynchronize(compute_stream(guard.device())));
}

void CudaCompute::release_cached_memory(int device) { caching_release_cached(device); }

bool CudaCompute::is_device_memory(const void* ptr, int device) {
  DeviceGuard guard(device);
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

Compute& cuda_compute() {
  static CudaCompute compute;
  return compute;
}

}  // namespace tessera::detail
