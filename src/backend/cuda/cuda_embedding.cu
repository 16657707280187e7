// CudaCompute, embedding family: row gathers and the gradient's scatter-add over a
// vocabulary shard (host twin: host_embedding.cpp). The scatter-add uses atomicAdd, so
// the order of additions into a row shared by several ids varies from run to run.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"

namespace tessera::detail {
namespace {

template <class T>
__global__ void embedding_gather_kernel(const std::int64_t* ids, std::int64_t count, const T* table,
                                        std::int64_t rows, std::int64_t dim, std::int64_t row_offset, T* y) {
  TESSERA_GRID_STRIDE(e, count * dim) {
    const std::int64_t k = e / dim, d = e % dim;
    const std::int64_t local = embedding_local_row(ids[k], row_offset, rows);
    y[e] = local >= 0 ? table[local * dim + d] : T(0);
  }
}

template <class T>
__global__ void embedding_scatter_add_kernel(const T* dy, const std::int64_t* ids, std::int64_t count, T* grad,
                                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset) {
  TESSERA_GRID_STRIDE(e, count * dim) {
    const std::int64_t k = e / dim, d = e % dim;
    const std::int64_t local = embedding_local_row(ids[k], row_offset, rows);
    if (local >= 0) atomicAdd(grad + local * dim + d, dy[e]);
  }
}

}  // namespace

void CudaCompute::embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                                   std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y,
                                   int device) {
  if (count * dim == 0) return;
  DeviceGuard guard(device);
  cudaStream_t s = compute_stream(guard.device());
  float_dispatch(dtype, "embedding", [&](auto tag) {
    using T = decltype(tag);
    embedding_gather_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
        ids, count, static_cast<const T*>(table), rows, dim, row_offset, static_cast<T*>(y));
  });
  TESSERA_CHECK_LAUNCH();
}

void CudaCompute::embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                        void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                        int device) {
  if (count * dim == 0) return;
  DeviceGuard guard(device);
  cudaStream_t s = compute_stream(guard.device());
  float_dispatch(dtype, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_scatter_add_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(dy), ids, count, static_cast<T*>(grad), rows, dim, row_offset);
  });
  TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera::detail
