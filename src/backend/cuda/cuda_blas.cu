// CUDA backend, BLAS half: cuBLAS GEMMs (f32, f64, and bf16 inputs with f32
// accumulation) with one handle per (device, stream), and the small BLAS-like kernels
// of ops.hpp (axpy, scale, bias, bias gradient, sum, dot). Reductions accumulate in
// double in a fixed order (deterministic for a given size), as the host loops do.

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/cuda_blas.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

// ---------------------------------------------------------------------------
// cuBLAS handles: one per (device, stream), created on first use and bound to the
// stream, so a GEMM is ordered with the kernels around it. Handles live until exit
// (destroying them from a static destructor races the runtime's own teardown).
// ---------------------------------------------------------------------------

class HandleTable {
 public:
  cublasHandle_t get(int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto key = std::make_pair(device, stream);
    auto it = handles_.find(key);
    if (it != handles_.end()) return it->second;
    cublasHandle_t handle = nullptr;
    TESSERA_CHECK_CUBLAS(cublasCreate(&handle));
    TESSERA_CHECK_CUBLAS(cublasSetStream(handle, stream));
    // Full-precision f32: no TF32 tensor-core shortcut, so device GEMMs stay within
    // fp32 tolerance of the host's OpenBLAS (the CUDA twin tests compare at ~1e-5).
    TESSERA_CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    handles_.emplace(key, handle);
    return handle;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, cudaStream_t>, cublasHandle_t> handles_;
};

HandleTable& handles() {
  static HandleTable table;
  return table;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    default: throw ShapeError("cuda gemm: dtype " + std::string(dtype_name(dtype)) + " is not a GEMM dtype");
  }
}

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------


template <class T>
__global__ void axpy_kernel(std::int64_t n, T alpha, const T* x, T* y) {
  TESSERA_GRID_STRIDE(i, n) { y[i] += alpha * x[i]; }
}

template <class T>
__global__ void scale_kernel(std::int64_t n, double alpha, T* y) {
  // In double, rounded once (the host's rule; ops::scale passes float(alpha) for f32).
  TESSERA_GRID_STRIDE(i, n) { y[i] = static_cast<T>(static_cast<double>(y[i]) * alpha); }
}

template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, std::int64_t total, std::int64_t channels,
                                std::int64_t inner) {
  TESSERA_GRID_STRIDE(i, total) { y[i] += bias[bias_channel(i, channels, inner)]; }
}

// One block per channel: grad[c] += sum over the channel's outer * inner elements.
template <class T>
__global__ void bias_grad_kernel(const T* dy, T* grad, std::int64_t outer, std::int64_t channels,
                                 std::int64_t inner) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t count = outer * inner;
  double acc = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    acc += static_cast<double>(dy[channel_element(c, j, channels, inner)]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) grad[c] += static_cast<T>(acc);
}

// Pass 1 of sum/dot: one double partial per block; pass 2 adds the partials in one block.
template <class T>
__global__ void dot_partials_kernel(const T* x, const T* y, std::int64_t n, double* partials) {
  double acc = 0;
  TESSERA_GRID_STRIDE(i, n) {
    acc += y ? static_cast<double>(x[i]) * static_cast<double>(y[i]) : static_cast<double>(x[i]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* partials, unsigned count, double* out) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = acc;
}


}  // namespace

void cuda_gemm(const GemmArgs& g, int device) {
  if (g.m == 0 || g.n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(guard.device());
  if (g.k == 0) {
    // C = beta C; like the host, an empty contraction only scales C.
    if (g.ldc != g.n) throw InternalError("cuda gemm: k == 0 needs a contiguous C");
    cuda_scale(g.c, g.m * g.n, g.beta, g.out, device);
    return;
  }
  const ColumnMajorGemm cm =
      row_major_gemm_as_column_major(g.transpose_a, g.transpose_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc);
  cublasHandle_t handle = handles().get(guard.device(), stream);
  const auto m = static_cast<int>(cm.m), n = static_cast<int>(cm.n), k = static_cast<int>(cm.k);
  const auto ld1 = static_cast<int>(cm.ld_first), ld2 = static_cast<int>(cm.ld_second),
             ldo = static_cast<int>(cm.ld_out);
  if (g.ab == DType::f64) {
    if (g.c != DType::f64) throw ShapeError("cuda gemm: f64 inputs need an f64 output");
    const double alpha = g.alpha, beta = g.beta;
    TESSERA_CHECK_CUBLAS(cublasDgemm(handle, op(cm.transpose_first), op(cm.transpose_second), m, n, k, &alpha,
                                     static_cast<const double*>(g.b), ld1, static_cast<const double*>(g.a), ld2,
                                     &beta, static_cast<double*>(g.out), ldo));
    return;
  }
  if (g.ab == DType::f32 && g.c != DType::f32) throw ShapeError("cuda gemm: f32 inputs need an f32 output");
  if (g.ab == DType::bf16 && g.c != DType::bf16 && g.c != DType::f32) {
    throw ShapeError("cuda gemm: bf16 inputs need a bf16 or f32 output");
  }
  // f32 and bf16 inputs: cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F, the
  // strict-precision compute type: no TF32 for f32 inputs).
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  TESSERA_CHECK_CUBLAS(cublasGemmEx(handle, op(cm.transpose_first), op(cm.transpose_second), m, n, k, &alpha, g.b,
                                    cuda_type(g.ab), ld1, g.a, cuda_type(g.ab), ld2, &beta, g.out, cuda_type(g.c),
                                    ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaCompute::axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) {
  if (n == 0) return;
  launch_typed(dtype, "axpy", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    axpy_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(n, static_cast<T>(alpha),
                                                                 static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void cuda_scale(DType dtype, std::int64_t n, double alpha, void* y, int device) {
  if (n == 0) return;
  launch_typed(dtype, "scale", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    scale_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(n, alpha, static_cast<T*>(y));
  });
}

void CudaCompute::add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                           std::int64_t inner, int device) {
  const std::int64_t total = outer * channels * inner;
  if (total == 0) return;
  launch_typed(dtype, "add_bias", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), total, channels, inner);
  });
}

void CudaCompute::accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer,
                                       std::int64_t channels, std::int64_t inner, int device) {
  if (channels == 0) return;
  launch_typed(dtype, "accumulate_bias_grad", device, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    bias_grad_kernel<T><<<static_cast<unsigned>(channels), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(grad), outer, channels, inner);
  });
}

double CudaCompute::dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) {
  return two_pass_sum(n, device, [&](unsigned blocks, double* partials, cudaStream_t stream) {
    float_dispatch(dtype, "sum/dot", [&](auto tag) {
      using T = decltype(tag);
      dot_partials_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                       static_cast<const T*>(y), n, partials);
    });
  });
}

double sum_partials(double* partials, unsigned blocks, cudaStream_t stream) {
  sum_partials_kernel<<<1, kThreadsPerBlock, 0, stream>>>(partials, blocks, partials + blocks);
  TESSERA_CHECK_LAUNCH();
  double result = 0;
  TESSERA_CHECK_CUDA(cudaMemcpyAsync(&result, partials + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  TESSERA_CHECK_CUDA(cudaStreamSynchronize(stream));
  return result;
}

// dot's kernel with y null adds x alone.
double CudaCompute::sum(DType dtype, const void* x, std::int64_t n, int device) {
  return dot(dtype, x, nullptr, n, device);
}

// Precision::bf16_mixed on f32 operands: bf16 copies from the caching allocator
// (stream-ordered, returned when the GEMM is queued), then cuBLAS's bf16 GEMM.
void CudaCompute::gemm(const GemmArgs& g, int device) {
  if (!g.round_to_bf16 || g.ab != DType::f32 || g.m == 0 || g.n == 0 || g.k == 0) {
    cuda_gemm(g, device);
    return;
  }
  const std::int64_t a_count = (g.transpose_a ? g.k : g.m) * g.lda, b_count = (g.transpose_b ? g.n : g.k) * g.ldb;
  DeviceScratch a16(static_cast<std::size_t>(a_count) * sizeof(__nv_bfloat16), device);
  DeviceScratch b16(static_cast<std::size_t>(b_count) * sizeof(__nv_bfloat16), device);
  cast(DType::f32, g.a, DType::bf16, a16.as<void>(), a_count, device);
  cast(DType::f32, g.b, DType::bf16, b16.as<void>(), b_count, device);
  GemmArgs rounded = g;
  rounded.ab = DType::bf16;
  rounded.a = a16.as<void>();
  rounded.b = b16.as<void>();
  rounded.round_to_bf16 = false;
  cuda_gemm(rounded, device);
}

}  // namespace tessera::detail
