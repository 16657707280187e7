// CudaCompute, normalisation family: LayerNorm and RMSNorm over the last dim and their
// backwards (host twin: host_norm.cpp). One block per row; row statistics in double with
// a fixed reduction tree, parameter gradients summed over rows in order.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_runtime.hpp"

namespace tessera::detail {
namespace {

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean, T* rstd,
                                  std::int64_t rows, std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    T* out = y + r * n;
    double s = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(in[i]);
    const double mu = block_sum(s) / static_cast<double>(n);
    double sq = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = static_cast<double>(in[i]) - mu;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(block_sum(sq) / static_cast<double>(n) + eps);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      double v = (static_cast<double>(in[i]) - mu) * inv;
      if (gamma) v *= static_cast<double>(gamma[i]);
      if (beta) v += static_cast<double>(beta[i]);
      out[i] = static_cast<T>(v);
    }
    if (threadIdx.x == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(inv);
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma. `mean` null: RMSNorm
// (xhat = x rstd, no mean(g) term).
template <class T>
__global__ void norm_backward_rows_kernel(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                                          T* dx, std::int64_t rows, std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    const T* d = dy + r * n;
    T* out = dx + r * n;
    const double mu = mean ? static_cast<double>(mean[r]) : 0.0;
    const double inv = static_cast<double>(rstd[r]);
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double xhat = (static_cast<double>(in[i]) - mu) * inv;
      const double g =
          gamma ? static_cast<double>(d[i]) * static_cast<double>(gamma[i]) : static_cast<double>(d[i]);
      sum_g += g;
      sum_gx += g * xhat;
    }
    const double mean_g = mean ? block_sum(sum_g) / static_cast<double>(n) : 0.0;
    const double mean_gx = block_sum(sum_gx) / static_cast<double>(n);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double xhat = (static_cast<double>(in[i]) - mu) * inv;
      const double g =
          gamma ? static_cast<double>(d[i]) * static_cast<double>(gamma[i]) : static_cast<double>(d[i]);
      out[i] = static_cast<T>(inv * (g - mean_g - xhat * mean_gx));
    }
  }
}

// One thread per column: dgamma[i] += sum_rows dy xhat, dbeta[i] += sum_rows dy (rows in
// order, as on the host).
template <class T>
__global__ void norm_param_grad_kernel(const T* dy, const T* x, const T* mean, const T* rstd, T* grad_gamma,
                                       T* grad_beta, std::int64_t rows, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    double dg = 0, db = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double d = static_cast<double>(dy[r * n + i]);
      const double mu = mean ? static_cast<double>(mean[r]) : 0.0;
      dg += d * ((static_cast<double>(x[r * n + i]) - mu) * static_cast<double>(rstd[r]));
      db += d;
    }
    if (grad_gamma) grad_gamma[i] += static_cast<T>(dg);
    if (grad_beta) grad_beta[i] += static_cast<T>(db);
  }
}

template <class T>
__global__ void rms_norm_kernel(const T* x, const T* gamma, double eps, T* y, T* rstd, std::int64_t rows,
                                std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    T* out = y + r * n;
    double sq = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) sq += static_cast<double>(in[i]) * in[i];
    const double inv = 1.0 / sqrt(block_sum(sq) / static_cast<double>(n) + eps);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      out[i] = static_cast<T>(gamma ? in[i] * inv * gamma[i] : in[i] * inv);
    }
    if (threadIdx.x == 0) rstd[r] = static_cast<T>(inv);
  }
}

void norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                   const void* rstd, void* dx, void* grad_gamma, void* grad_beta, std::int64_t rows,
                   std::int64_t n, int device) {
  if (rows == 0) return;
  launch_typed(dtype, "norm_backward", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    norm_backward_rows_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(gamma),
        static_cast<const T*>(mean), static_cast<const T*>(rstd), static_cast<T*>(dx), rows, n);
    if (grad_gamma != nullptr || grad_beta != nullptr) {
      norm_param_grad_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(mean),
          static_cast<const T*>(rstd), static_cast<T*>(grad_gamma), static_cast<T*>(grad_beta), rows, n);
    }
  });
}

}  // namespace

void CudaCompute::layer_norm(DType dtype, const void* x, const void* gamma, const void* beta, double eps, void* y,
                             void* mean, void* rstd, std::int64_t rows, std::int64_t n, int device) {
  if (rows == 0) return;
  launch_typed(dtype, "layer_norm", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), eps,
        static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd), rows, n);
  });
}

void CudaCompute::layer_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma,
                                      const void* mean, const void* rstd, void* dx, void* grad_gamma,
                                      void* grad_beta, std::int64_t rows, std::int64_t n, int device) {
  norm_backward(dtype, dy, x, gamma, mean, rstd, dx, grad_gamma, grad_beta, rows, n, device);
}

void CudaCompute::rms_norm(DType dtype, const void* x, const void* gamma, double eps, void* y, void* rstd,
                           std::int64_t rows, std::int64_t n, int device) {
  if (rows == 0) return;
  launch_typed(dtype, "rms_norm", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    rms_norm_kernel<T>
        <<<row_grid(rows), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(gamma), eps,
                                                     static_cast<T*>(y), static_cast<T*>(rstd), rows, n);
  });
}

void CudaCompute::rms_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma,
                                    const void* rstd, void* dx, void* grad_gamma, std::int64_t rows,
                                    std::int64_t n, int device) {
  norm_backward(dtype, dy, x, gamma, nullptr, rstd, dx, grad_gamma, nullptr, rows, n, device);
}

}  // namespace tessera::detail
