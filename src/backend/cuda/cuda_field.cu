// CUDA backend, field half: the latitude-weighted squared error of the domain loss and
// the per-channel affine map of field normalisation (twins of
// backend/host/host_field.cpp, in double per element; the error sum is combined in a
// fixed order, so it is deterministic for a given shape).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_runtime.hpp"

namespace tessera::detail {
namespace {


template <class T>
__global__ void weighted_error_kernel(const T* p, const T* t, const double* w, std::int64_t count, std::int64_t rows,
                                      std::int64_t cols, double grad_scale, T* g, double* partials) {
  double acc = 0;
  TESSERA_GRID_STRIDE(k, count) {
    const double wi = w[(k / cols) % rows];
    const double diff = static_cast<double>(p[k]) - static_cast<double>(t[k]);
    acc += wi * diff * diff;
    g[k] = static_cast<T>(grad_scale * wi * diff);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class T>
__global__ void channel_affine_kernel(T* x, const double* scale, const double* shift, std::int64_t count,
                                      std::int64_t channels, std::int64_t inner) {
  TESSERA_GRID_STRIDE(k, count) {
    const std::int64_t c = (k / inner) % channels;
    x[k] = static_cast<T>(__dadd_rn(__dmul_rn(static_cast<double>(x[k]), scale[c]), shift[c]));
  }
}

}  // namespace

double CudaCompute::weighted_squared_error(DType dtype, const void* prediction, const void* target,
                                           const double* row_weights, std::int64_t planes, std::int64_t rows,
                                           std::int64_t cols, double grad_scale, void* grad, int device) {
  const std::int64_t count = planes * rows * cols;
  return two_pass_sum(count, device, [&](unsigned blocks, double* partials, cudaStream_t stream) {
    float_dispatch(dtype, "weighted_squared_error", [&](auto tag) {
      using T = decltype(tag);
      weighted_error_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(prediction), static_cast<const T*>(target), row_weights, count, rows, cols,
          grad_scale, static_cast<T*>(grad), partials);
    });
  });
}

void CudaCompute::channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                                 std::int64_t channels, std::int64_t inner, int device) {
  const std::int64_t count = outer * channels * inner;
  if (count == 0) return;
  launch_typed(dtype, "channel_affine", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    channel_affine_kernel<T><<<grid_for(count), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(x), scale, shift,
                                                                              count, channels, inner);
  });
}

}  // namespace tessera::detail
