// CudaCompute, attention family: per (batch, head), Q K^T and P V as cuBLAS GEMMs on the
// head's column block (row stride = width) and the softmax and its backward as row
// kernels in double (host twin: host_attention.cpp, which fuses the same steps).
// Grouped-query attention: query head h reads key/value head h / group (row stride
// kv_width); the group's dK and dV GEMMs accumulate into one block (beta = 1 after the
// first query head of the group).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_blas.hpp"
#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"

namespace tessera::detail {
namespace {

// Attention rows: scores [batch * S, S] -> probabilities in place.
template <class T>
__global__ void softmax_rows_kernel(T* scores, std::int64_t rows, std::int64_t seq, double scale, bool causal) {
  TESSERA_BLOCK_ROWS(r, rows) {
    T* row = scores + r * seq;
    const std::int64_t keys = attention_keys(r % seq, seq, causal);
    double m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) m = fmax(m, static_cast<double>(row[j]) * scale);
    m = block_max(m);
    double total = 0;
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
      total += exp(static_cast<double>(row[j]) * scale - m);
    total = block_sum(total);
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      row[j] = j < keys ? static_cast<T>(exp(static_cast<double>(row[j]) * scale - m) / total) : T(0);
    }
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(const T* probs, T* dp, std::int64_t rows, std::int64_t seq,
                                             double scale) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* p = probs + r * seq;
    T* d = dp + r * seq;
    double dotp = 0;
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
      dotp += static_cast<double>(p[j]) * static_cast<double>(d[j]);
    dotp = block_sum(dotp);
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      d[j] = static_cast<T>(static_cast<double>(p[j]) * (static_cast<double>(d[j]) - dotp) * scale);
    }
  }
}

// Address of element `element` of an array of `dtype`.
void* at(const void* base, std::int64_t element, DType dtype) {
  return static_cast<unsigned char*>(const_cast<void*>(base)) +
         element * static_cast<std::int64_t>(dtype_size(dtype));
}

// C [m, n] (row stride ldc) = op(A) op(B) + beta C for one head's blocks.
void head_gemm(DType dtype, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
               std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc, int device,
               double beta = 0.0) {
  GemmArgs g;
  g.ab = g.c = dtype;
  g.transpose_a = ta;
  g.transpose_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.out = c;
  g.ldc = ldc;
  g.beta = beta;
  cuda_gemm(g, device);
}

void softmax_rows(DType dtype, void* scores, std::int64_t batch, std::int64_t seq, double scale, bool causal,
                  int device) {
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  launch_typed(dtype, "softmax_rows", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    softmax_rows_kernel<T>
        <<<row_grid(rows), kThreadsPerBlock, 0, s>>>(static_cast<T*>(scores), rows, seq, scale, causal);
  });
}

void softmax_backward_rows(DType dtype, const void* probs, void* dp, std::int64_t batch, std::int64_t seq,
                           double scale, int device) {
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  launch_typed(dtype, "softmax_backward_rows", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    softmax_backward_rows_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
        static_cast<const T*>(probs), static_cast<T*>(dp), rows, seq, scale);
  });
}

}  // namespace

// Attention per (batch, head): GEMMs on the head's column block (row stride W; K and V:
// their key/value head's block, row stride KW) and row kernels for the softmax and its
// backward.
void CudaCompute::attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                            const AttentionShape& shape, int device) {
  const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, H = shape.heads, hd = shape.head_dim();
  const std::int64_t KW = shape.kv_width(), G = shape.group();
  if (B * S == 0) return;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t base = b * S * W + h * hd, kv_base = b * S * KW + (h / G) * hd;
      // scores = Q K^T (scaled inside the softmax kernel)
      head_gemm(dtype, false, true, S, S, hd, at(q, base, dtype), W, at(k, kv_base, dtype), KW,
                at(probs, (b * H + h) * S * S, dtype), S, device);
    }
  softmax_rows(dtype, probs, B * H, S, shape.scale, shape.causal, device);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t base = b * S * W + h * hd, kv_base = b * S * KW + (h / G) * hd;
      head_gemm(dtype, false, false, S, hd, S, at(probs, (b * H + h) * S * S, dtype), S, at(v, kv_base, dtype), KW,
                at(out, base, dtype), W, device);
    }
}

void CudaCompute::attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                                     const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                                     int device) {
  const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, H = shape.heads, hd = shape.head_dim();
  const std::int64_t KW = shape.kv_width(), G = shape.group();
  if (B * S == 0) return;
  DeviceGuard guard(device);
  DeviceScratch dp_scratch(static_cast<std::size_t>(B * H * S * S) * dtype_size(dtype), guard.device());
  void* dp = dp_scratch.as<void>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t base = b * S * W + h * hd, kv_base = b * S * KW + (h / G) * hd;
      // dP = dO V^T
      head_gemm(dtype, false, true, S, S, hd, at(dout, base, dtype), W, at(v, kv_base, dtype), KW,
                at(dp, (b * H + h) * S * S, dtype), S, device);
    }
  // dS = P (dP - rowsum(P dP)) scale, in place
  softmax_backward_rows(dtype, probs, dp, B * H, S, shape.scale, device);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t base = b * S * W + h * hd, kv_base = b * S * KW + (h / G) * hd;
      const double beta = h % G == 0 ? 0.0 : 1.0;  // the group's later heads add to its dK, dV
      const void* ds = at(dp, (b * H + h) * S * S, dtype);
      const void* p = at(probs, (b * H + h) * S * S, dtype);
      head_gemm(dtype, false, false, S, hd, S, ds, S, at(k, kv_base, dtype), KW, at(dq, base, dtype), W, device);
      head_gemm(dtype, true, false, S, hd, S, ds, S, at(q, base, dtype), W, at(dk, kv_base, dtype), KW, device,
                beta);
      head_gemm(dtype, true, false, S, hd, S, p, S, at(dout, base, dtype), W, at(dv, kv_base, dtype), KW, device,
                beta);
    }
}

}  // namespace tessera::detail
