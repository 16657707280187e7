// CudaCompute, optimizer and clipping family: the sum of squares behind gradient
// clipping, the scale that applies the clip (bf16 here, f32/f64 in cuda_blas.cu), casts
// between f32/f64/bf16, and the SGD and AdamW element updates. Each kernel runs the
// double arithmetic of its host twin (host_optim.cpp, host_blas.cpp, host_elementwise.cpp)
// per element, rounding at the same steps (the device's double sqrt and division are
// correctly rounded), so results equal the host's to the last bit of the dtype unless
// the host compiler contracts a*b + c into an FMA.

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_blas.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "tessera/bfloat16.hpp"

namespace tessera::detail {
namespace {

// Widening as the host does it: bf16 and f32 through float, f64 as is.
template <class T>
__device__ double widen(T x) {
  return static_cast<double>(static_cast<float>(x));
}
template <>
__device__ double widen<double>(double x) {
  return x;
}

// Pass 1: one double partial per block; pass 2 adds the partials in one block (fixed
// order for a given launch geometry, so the norm is deterministic).
template <class T>
__global__ void sum_squares_partials_kernel(const T* x, std::int64_t n, double* partials) {
  double acc = 0;
  TESSERA_GRID_STRIDE(i, n) {
    const double v = widen(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void scale_bf16_kernel(std::int64_t n, double alpha, bfloat16* y) {
  TESSERA_GRID_STRIDE(i, n) { y[i] = bfloat16(static_cast<float>(static_cast<float>(y[i]) * alpha)); }
}

template <class To, class From>
__global__ void cast_kernel(const From* src, To* dst, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    if constexpr (std::is_same_v<To, bfloat16>) {
      dst[i] = bfloat16(static_cast<float>(src[i]));
    } else if constexpr (std::is_same_v<From, bfloat16>) {
      dst[i] = static_cast<To>(static_cast<float>(src[i]));
    } else {
      dst[i] = static_cast<To>(src[i]);
    }
  }
}

// The _rn intrinsics keep nvcc from contracting a*b + c into an FMA (here and in
// adamw_kernel), so every step rounds as the host's (x86-64 without -mfma) does.
template <class T>
__global__ void sgd_kernel(std::int64_t n, T* value, const T* grad, T* buf, SgdStep s) {
  TESSERA_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(value[i]);
    double d = __dadd_rn(static_cast<double>(grad[i]), __dmul_rn(s.weight_decay, v));
    if (buf != nullptr) {
      const double b =
          s.first ? d
                  : __dadd_rn(__dmul_rn(s.momentum, static_cast<double>(buf[i])), __dmul_rn(1.0 - s.dampening, d));
      buf[i] = static_cast<T>(b);
      d = s.nesterov ? __dadd_rn(d, __dmul_rn(s.momentum, b)) : b;
    }
    value[i] = static_cast<T>(__dadd_rn(v, -__dmul_rn(s.lr, d)));
  }
}

template <class T>
__global__ void adamw_kernel(std::int64_t n, T* value, const T* grad, T* m, T* v, AdamWStep s) {
  TESSERA_GRID_STRIDE(i, n) {
    const double w = static_cast<double>(value[i]), g = static_cast<double>(grad[i]);
    const double mi = __dadd_rn(__dmul_rn(s.beta1, static_cast<double>(m[i])), __dmul_rn(1.0 - s.beta1, g));
    const double vi =
        __dadd_rn(__dmul_rn(s.beta2, static_cast<double>(v[i])), __dmul_rn(__dmul_rn(1.0 - s.beta2, g), g));
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double denom = __dadd_rn(__ddiv_rn(sqrt(vi), s.bias_correction2_sqrt), s.eps);
    value[i] = static_cast<T>(__dadd_rn(__dmul_rn(w, s.decay), -__ddiv_rn(__dmul_rn(s.step_size, mi), denom)));
  }
}

// Calls f(T{}) for f32, f64 and bf16.
template <class F>
void for_any_float(DType dtype, F&& f) {
  if (dtype == DType::f32) {
    f(float{});
  } else if (dtype == DType::f64) {
    f(double{});
  } else {
    f(bfloat16{});
  }
}

}  // namespace

double CudaCompute::sum_squares(DType dtype, const void* x, std::int64_t n, int device) {
  return two_pass_sum(n, device, [&](unsigned blocks, double* partials, cudaStream_t stream) {
    for_any_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      sum_squares_partials_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x), n,
                                                                               partials);
    });
  });
}

void CudaCompute::scale(DType dtype, std::int64_t n, double alpha, void* y, int device) {
  if (dtype != DType::bf16) {
    cuda_scale(dtype, n, alpha, y, device);
    return;
  }
  if (n == 0) return;
  DeviceGuard guard(device);
  scale_bf16_kernel<<<grid_for(n), kThreadsPerBlock, 0, compute_stream(guard.device())>>>(
      n, alpha, static_cast<bfloat16*>(y));
  TESSERA_CHECK_LAUNCH();
}

void CudaCompute::cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device) {
  if (n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(guard.device());
  for_any_float(dst_dtype, [&](auto to_tag) {
    using To = decltype(to_tag);
    for_any_float(src_dtype, [&](auto from_tag) {
      using From = decltype(from_tag);
      cast_kernel<To, From>
          <<<grid_for(n), kThreadsPerBlock, 0, stream>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
  TESSERA_CHECK_LAUNCH();
}

void CudaCompute::sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                             const SgdStep& step, int device) {
  if (n == 0) return;
  launch_typed(dtype, "sgd_update", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        n, static_cast<T*>(value), static_cast<const T*>(grad), static_cast<T*>(momentum_buffer), step);
  });
}

void CudaCompute::adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg,
                               void* exp_avg_sq, const AdamWStep& step, int device) {
  if (n == 0) return;
  launch_typed(dtype, "adamw_update", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    adamw_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        n, static_cast<T*>(value), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
        static_cast<T*>(exp_avg_sq), step);
  });
}

}  // namespace tessera::detail
