#pragma once
// Index and rounding math of the CUDA backend, as host/device inline functions with no
// vendor header: the kernels call exactly these, and tests/cuda/test_kernel_math.cpp
// exercises them on the host (so this part of the backend is tested on machines
// without a GPU). Index math shared by host and device lives in __host__ __device__
// functions (docs/architecture.md, "Floors and folders").

#include <cstddef>
#include <cstdint>

#include "tessera/detail/host_device.hpp"
#include "tessera/detail/strided_index.hpp"

namespace tessera::detail {

// ---- Caching allocator buckets
// Small blocks round up to 512 bytes (cudaMalloc's own alignment granularity), large
// ones (over 1 MiB) to 2 MiB: a freed block serves any later request of its bucket, so
// coarse large buckets keep the number of distinct free lists small while wasting at
// most 2 MiB per large tensor.
inline constexpr std::size_t kSmallBucket = 512;
inline constexpr std::size_t kLargeBucket = std::size_t{2} << 20;
inline constexpr std::size_t kSmallLimit = std::size_t{1} << 20;

TESSERA_HOST_DEVICE inline std::size_t caching_bucket_bytes(std::size_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t unit = bytes <= kSmallLimit ? kSmallBucket : kLargeBucket;
  return (bytes + unit - 1) / unit * unit;
}

// ---- Row-major GEMM through a column-major BLAS
// tessera tensors are row-major; cuBLAS is column-major. A row-major [r, c] matrix with
// row stride ld is, read column-major, its transpose [c, r] with leading dimension ld.
// So row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: the
// BLAS call takes B first, A second, with m and n swapped and each operand's
// transpose flag unchanged (op(B)^T of the stored B^T is B^T itself when B is not
// transposed, and its transpose when it is).
struct ColumnMajorGemm {
  bool transpose_first = false;   // op of the first BLAS operand (our B)
  bool transpose_second = false;  // op of the second BLAS operand (our A)
  std::int64_t m = 0, n = 0, k = 0;  // BLAS m, n, k
  std::int64_t ld_first = 0, ld_second = 0, ld_out = 0;
};

// C [m, n] = op(A) [m, k] op(B) [k, n], row-major, with row strides lda, ldb, ldc.
TESSERA_HOST_DEVICE inline ColumnMajorGemm row_major_gemm_as_column_major(
    bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
    std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  ColumnMajorGemm g;
  g.transpose_first = transpose_b;
  g.transpose_second = transpose_a;
  g.m = n;
  g.n = m;
  g.k = k;
  g.ld_first = ldb;
  g.ld_second = lda;
  g.ld_out = ldc;
  return g;
}

// ---- Bias along a channel dim: y viewed as [outer, channels, inner], element i's channel.
TESSERA_HOST_DEVICE inline std::int64_t bias_channel(std::int64_t linear, std::int64_t channels,
                                                     std::int64_t inner) {
  return (linear / inner) % channels;
}
// Element j (of outer * inner) of channel c in y viewed as [outer, channels, inner].
TESSERA_HOST_DEVICE inline std::int64_t channel_element(std::int64_t c, std::int64_t j,
                                                        std::int64_t channels, std::int64_t inner) {
  return ((j / inner) * channels + c) * inner + j % inner;
}

// ---- Embedding: the local row of a global id, -1 when another shard owns it.
TESSERA_HOST_DEVICE inline std::int64_t embedding_local_row(std::int64_t id, std::int64_t row_offset,
                                                            std::int64_t rows) {
  const std::int64_t local = id - row_offset;
  return (local >= 0 && local < rows) ? local : -1;
}

// ---- Vocab-parallel cross-entropy: the local column of a row's target, -1 when the
// target is ignored or lives on another rank's shard [first, first + v_local).
TESSERA_HOST_DEVICE inline std::int64_t vocab_target_column(std::int64_t target, std::int64_t first,
                                                            std::int64_t v_local, std::int64_t ignore_index) {
  if (target == ignore_index) return -1;
  return (target >= first && target < first + v_local) ? target - first : -1;
}

// ---- Attention: keys query row i may see (all S, or i + 1 under the causal mask).
TESSERA_HOST_DEVICE inline std::int64_t attention_keys(std::int64_t query_row, std::int64_t seq, bool causal) {
  return causal ? query_row + 1 : seq;
}

// ---- Initialisation of a block of a global tensor
// Element `linear` (row-major over `local.shape`) of a block at `offset` inside a
// global tensor with row-major `global_strides` has the global flat index returned;
// its memory offset in the local tensor is strided_offset(linear, local).
TESSERA_HOST_DEVICE inline std::int64_t block_global_index(std::int64_t linear, const StridedLayout& local,
                                                           const std::int64_t* offset,
                                                           const std::int64_t* global_strides) {
  std::int64_t g = 0;
  for (int d = local.ndim - 1; d >= 0; --d) {
    const std::int64_t extent = local.shape[d];
    g += (offset[d] + linear % extent) * global_strides[d];
    linear /= extent;
  }
  return g;
}

// a + (b - a) u without a fused multiply-add: nvcc contracts a*b + c into an FMA by
// default, which rounds once instead of twice and would make a device-initialised
// weight differ in the last bit from the host's. The _rn intrinsics are never
// contracted; on the host (x86-64 without -mfma) the plain expression rounds the same.
TESSERA_HOST_DEVICE inline double uniform_in(double a, double b, double u) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, __dmul_rn(__dadd_rn(b, -a), u));
#else
  return a + (b - a) * u;
#endif
}

// ---- im2col: entry `linear` of cols [C_in*kh*kw, OH*OW] reads x[c, iy, ix] of one
// sample [C_in, H, W]; returns that element's offset, or -1 for zero padding.
struct Im2colGeometry {
  std::int64_t c_in = 0, h = 0, w = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
};

TESSERA_HOST_DEVICE inline std::int64_t im2col_source(std::int64_t linear, const Im2colGeometry& g) {
  const std::int64_t pixels = g.oh * g.ow;
  const std::int64_t p = linear % pixels;
  const std::int64_t row = linear / pixels;  // (c, i, j)
  const std::int64_t j = row % g.kw;
  const std::int64_t i = (row / g.kw) % g.kh;
  const std::int64_t c = row / (g.kw * g.kh);
  const std::int64_t oy = p / g.ow, ox = p % g.ow;
  const std::int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
  const std::int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
  return (c * g.h + iy) * g.w + ix;
}

// col2im as a gather (one thread per x element, no atomics, deterministic): the cols
// entry that im2col filled from x[c, iy, ix] through kernel tap (i, j), or -1 when
// that tap never read it.
TESSERA_HOST_DEVICE inline std::int64_t col2im_entry(std::int64_t c, std::int64_t iy, std::int64_t ix,
                                                     std::int64_t i, std::int64_t j, const Im2colGeometry& g) {
  const std::int64_t ny = iy + g.pad_h - i * g.dil_h;
  const std::int64_t nx = ix + g.pad_w - j * g.dil_w;
  if (ny < 0 || nx < 0 || ny % g.stride_h != 0 || nx % g.stride_w != 0) return -1;
  const std::int64_t oy = ny / g.stride_h, ox = nx / g.stride_w;
  if (oy >= g.oh || ox >= g.ow) return -1;
  return ((c * g.kh + i) * g.kw + j) * (g.oh * g.ow) + oy * g.ow + ox;
}

}  // namespace tessera::detail
