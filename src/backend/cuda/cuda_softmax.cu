// CudaCompute, cross-entropy pieces over logits [n, v] (host twin: host_softmax.cpp): row
// maxima and sums of exponentials in double, one block per row, and the softmax-minus-
// one-hot gradient element-wise.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"

namespace tessera::detail {
namespace {

template <class T>
__global__ void row_max_kernel(const T* x, std::int64_t n, std::int64_t v, double* out) {
  TESSERA_BLOCK_ROWS(r, n) {
    double m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmax(m, static_cast<double>(x[r * v + j]));
    m = block_max(m);
    if (threadIdx.x == 0) out[r] = m;
  }
}

template <class T>
__global__ void sum_exp_target_kernel(const T* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                                      std::int64_t first, std::int64_t ignore_index, const double* row_max,
                                      double* sum_exp, double* target_logit) {
  TESSERA_BLOCK_ROWS(r, n) {
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x)
      s += exp(static_cast<double>(x[r * v + j]) - row_max[r]);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      sum_exp[r] = s;
      const std::int64_t col = vocab_target_column(targets[r], first, v, ignore_index);
      target_logit[r] = col >= 0 ? static_cast<double>(x[r * v + col]) : 0.0;
    }
  }
}

template <class T>
__global__ void cross_entropy_grad_kernel(const T* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                                          std::int64_t first, std::int64_t ignore_index, const double* row_max,
                                          const double* sum_exp, double denom, T* grad) {
  TESSERA_GRID_STRIDE(e, n * v) {
    const std::int64_t i = e / v, j = e % v;
    if (targets[i] == ignore_index) {
      grad[e] = T(0);
      continue;
    }
    double p = exp(static_cast<double>(x[e]) - row_max[i]) / sum_exp[i];
    if (first + j == targets[i]) p -= 1.0;
    grad[e] = static_cast<T>(p / denom);
  }
}

}  // namespace

void CudaCompute::row_max(DType dtype, const void* x, std::int64_t n, std::int64_t v, double* out, int device) {
  if (n == 0) return;
  launch_typed(dtype, "row_max", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    row_max_kernel<T><<<row_grid(n), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), n, v, out);
  });
}

void CudaCompute::sum_exp_and_target(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n,
                                     std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                     const double* row_max, double* sum_exp, double* target_logit, int device) {
  if (n == 0) return;
  launch_typed(dtype, "sum_exp_and_target", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    sum_exp_target_kernel<T><<<row_grid(n), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(x), targets, n, v, first, ignore_index, row_max, sum_exp, target_logit);
  });
}

void CudaCompute::cross_entropy_grad(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n,
                                     std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                     const double* row_max, const double* sum_exp, double denom, void* grad,
                                     int device) {
  if (n * v == 0) return;
  launch_typed(dtype, "cross_entropy_grad", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    cross_entropy_grad_kernel<T>
        <<<grid_for(n * v), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), targets, n, v, first, ignore_index,
                                                      row_max, sum_exp, denom, static_cast<T*>(grad));
  });
}

}  // namespace tessera::detail
