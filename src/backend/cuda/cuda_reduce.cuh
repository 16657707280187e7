#pragma once
// Private to the CUDA kernels: a deterministic block-wide sum in double. Each thread's
// partial is combined in a fixed tree (warp shuffles, then one warp over the warps'
// sums), so a given launch geometry always adds in the same order.

#include <cuda_runtime.h>

namespace tessera::detail {

// Sum of `value` over the block; every thread gets the result. blockDim.x must be a
// multiple of 32 and at most 1024. Uses 33 doubles of shared memory.
__device__ inline double block_sum(double value) {
  __shared__ double warp_sums[32];
  __shared__ double result;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = blockDim.x / 32;
    double v = lane < warps ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) result = v;
  }
  __syncthreads();
  const double total = result;
  __syncthreads();  // the shared slots may be reused by the next call
  return total;
}

__device__ inline double block_max(double value) {
  __shared__ double warp_max[32];
  __shared__ double result;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) value = fmax(value, __shfl_down_sync(0xffffffffu, value, offset));
  if (lane == 0) warp_max[warp] = value;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = blockDim.x / 32;
    double v = lane < warps ? warp_max[lane] : -INFINITY;
    for (int offset = 16; offset > 0; offset /= 2) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) result = v;
  }
  __syncthreads();
  const double total = result;
  __syncthreads();
  return total;
}

}  // namespace tessera::detail
