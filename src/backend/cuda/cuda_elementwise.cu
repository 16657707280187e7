// CudaCompute, element-wise family: GELU/SiLU and their derivatives, SwiGLU (host twin:
// host_elementwise.cpp, with the same formulas). Each element is evaluated in double and
// rounded once to the dtype.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"

namespace tessera::detail {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

__device__ double gelu_value(double x) { return 0.5 * x * (1.0 + erf(x * kInvSqrt2)); }
__device__ double gelu_derivative(double x) {
  return 0.5 * (1.0 + erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * exp(-0.5 * x * x);
}
__device__ double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}
__device__ double silu_value(double x) { return x * sigmoid(x); }
__device__ double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

template <class T>
__global__ void activation_kernel(bool gelu, const T* x, T* y, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    y[i] = static_cast<T>(gelu ? gelu_value(v) : silu_value(v));
  }
}

template <class T>
__global__ void activation_backward_kernel(bool gelu, const T* dy, const T* x, T* dx, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    dx[i] = static_cast<T>(static_cast<double>(dy[i]) * (gelu ? gelu_derivative(v) : silu_derivative(v)));
  }
}

template <class T>
__global__ void swiglu_kernel(const T* gate, const T* up, T* y, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double g = static_cast<double>(gate[i]);
    y[i] = static_cast<T>(g * sigmoid(g) * static_cast<double>(up[i]));
  }
}

template <class T>
__global__ void swiglu_backward_kernel(const T* dy, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double g = static_cast<double>(gate[i]);
    const double s = sigmoid(g);
    const double d = static_cast<double>(dy[i]);
    dgate[i] = static_cast<T>(d * static_cast<double>(up[i]) * s * (1.0 + g * (1.0 - s)));
    dup[i] = static_cast<T>(d * g * s);
  }
}

}  // namespace

void CudaCompute::activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n, int device) {
  if (n == 0) return;
  launch_typed(dtype, "activation", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    activation_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(kind == Activation::gelu,
                                                                  static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

void CudaCompute::activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx,
                                      std::int64_t n, int device) {
  if (n == 0) return;
  launch_typed(dtype, "activation_backward", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    activation_backward_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
        kind == Activation::gelu, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), n);
  });
}

void CudaCompute::swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int device) {
  if (n == 0) return;
  launch_typed(dtype, "swiglu", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    swiglu_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(gate),
                                                              static_cast<const T*>(up), static_cast<T*>(y), n);
  });
}

void CudaCompute::swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate,
                                  void* dup, std::int64_t n, int device) {
  if (n == 0) return;
  launch_typed(dtype, "swiglu_backward", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(dgate),
        static_cast<T*>(dup), n);
  });
}

}  // namespace tessera::detail
