// CudaCompute, embedding family: row gathers, the gradient's scatter-add over a
// vocabulary shard, and max_norm's row norms and rescale (host twin:
// host_embedding.cpp). The scatter-add uses atomicAdd, so the order of additions into a
// row shared by several ids varies from run to run. The row norms reduce in a fixed
// block tree (deterministic for a given launch).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/embedding_norm.hpp"
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
                                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                             const double* id_scale, std::int64_t skip_id) {
  TESSERA_GRID_STRIDE(e, count * dim) {
    const std::int64_t k = e / dim, d = e % dim;
    const std::int64_t local = embedding_local_row(ids[k], row_offset, rows);
    if (local < 0 || ids[k] == skip_id) continue;
    const T value = id_scale == nullptr ? dy[e] : static_cast<T>(id_scale[k] * static_cast<double>(dy[e]));
    atomicAdd(grad + local * dim + d, value);
  }
}

// One block per row: the block's terms reduce like embedding_norm_combine (sum, max or
// min; a min is minus the max of the negated terms).
template <class T>
__global__ void embedding_norm_partials_kernel(const std::int64_t* rows, std::int64_t n, const T* table,
                                               std::int64_t dim, double p, double* partials) {
  const int kind = embedding_norm_reduction_kind(p);
  TESSERA_BLOCK_ROWS(i, n) {
    const T* row = table + rows[i] * dim;
    double acc = embedding_norm_identity(p);
    for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x)
      acc = embedding_norm_combine(acc, embedding_norm_term(static_cast<double>(row[d]), p), p);
    if (kind == 0) acc = block_sum(acc);
    else if (kind > 0) acc = block_max(acc);
    else acc = -block_max(-acc);
    if (threadIdx.x == 0) partials[i] = acc;
  }
}

template <class T>
__global__ void embedding_renorm_rows_kernel(const std::int64_t* rows, std::int64_t n, T* table, std::int64_t dim,
                                             const double* partials, double p, double max_norm) {
  TESSERA_GRID_STRIDE(e, n * dim) {
    const std::int64_t i = e / dim, d = e % dim;
    const double scale = embedding_renorm_scale(embedding_norm_finish(partials[i], p), max_norm);
    if (scale != 1.0) {
      T& x = table[rows[i] * dim + d];
      x = static_cast<T>(static_cast<double>(x) * scale);
    }
  }
}

}  // namespace

void CudaCompute::embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                                   std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y,
                                   int device) {
  if (count * dim == 0) return;
  launch_typed(dtype, "embedding", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    embedding_gather_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
        ids, count, static_cast<const T*>(table), rows, dim, row_offset, static_cast<T*>(y));
  });
}

void CudaCompute::embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                        void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                        const double* id_scale, std::int64_t skip_id, int device) {
  if (count * dim == 0) return;
  launch_typed(dtype, "embedding_backward", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    embedding_scatter_add_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(dy), ids, count, static_cast<T*>(grad), rows, dim, row_offset, id_scale, skip_id);
  });
}

void CudaCompute::embedding_norm_partials(DType dtype, const std::int64_t* rows, std::int64_t n, const void* table,
                                          std::int64_t dim, double norm_type, double* partials, int device) {
  if (n == 0) return;
  launch_typed(dtype, "embedding_norm_partials", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    embedding_norm_partials_kernel<T><<<row_grid(n), kThreadsPerBlock, 0, s>>>(
        rows, n, static_cast<const T*>(table), dim, norm_type, partials);
  });
}

void CudaCompute::embedding_renorm_rows(DType dtype, const std::int64_t* rows, std::int64_t n, void* table,
                                        std::int64_t dim, const double* partials, double norm_type,
                                        double max_norm, int device) {
  if (n * dim == 0) return;
  launch_typed(dtype, "embedding_renorm_rows", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    embedding_renorm_rows_kernel<T><<<grid_for(n * dim), kThreadsPerBlock, 0, s>>>(
        rows, n, static_cast<T*>(table), dim, partials, norm_type, max_norm);
  });
}

}  // namespace tessera::detail
