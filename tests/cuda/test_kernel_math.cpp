// The index and rounding math of the CUDA kernels (src/backend/kernel_math.hpp),
// run on the host. These functions are __host__ __device__: the kernels call exactly
// this code, so these tests pass (not skip) on a machine without a GPU and cover the
// part of each kernel that decides *which* element goes where.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "backend/kernel_math.hpp"
#include "tessera/detail/philox.hpp"
#include "tessera/init.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera::detail;
using tessera::DType;
using tessera::InitSpec;
using tessera::Shape;
using tessera::Tensor;

TEST(KernelMath, CachingBucketsRoundUpToSmallAndLargeUnits) {
  EXPECT_EQ(caching_bucket_bytes(0), 0u);
  EXPECT_EQ(caching_bucket_bytes(1), 512u);
  EXPECT_EQ(caching_bucket_bytes(512), 512u);
  EXPECT_EQ(caching_bucket_bytes(513), 1024u);
  EXPECT_EQ(caching_bucket_bytes(std::size_t{1} << 20), std::size_t{1} << 20);
  EXPECT_EQ(caching_bucket_bytes((std::size_t{1} << 20) + 1), std::size_t{2} << 20);
  EXPECT_EQ(caching_bucket_bytes(std::size_t{3} << 20), std::size_t{4} << 20);
  std::size_t previous = 0;
  for (std::size_t bytes = 1; bytes < (std::size_t{5} << 20); bytes = bytes * 3 / 2 + 7) {
    const std::size_t bucket = caching_bucket_bytes(bytes);
    EXPECT_GE(bucket, bytes);
    EXPECT_GE(bucket, previous);  // monotone: a bigger request never gets a smaller bucket
    EXPECT_EQ(bucket % kSmallBucket, 0u);
    EXPECT_EQ(caching_bucket_bytes(bucket), bucket);  // a bucket is its own bucket
    previous = bucket;
  }
}

// Column-major reference BLAS: C[i + j*ldc] = sum_l op(A)[i, l] op(B)[l, j].
void column_major_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const double* a,
                       std::int64_t lda, const double* b, std::int64_t ldb, double* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        const double av = ta ? a[l + i * lda] : a[i + l * lda];
        const double bv = tb ? b[j + l * ldb] : b[l + j * ldb];
        acc += av * bv;
      }
      c[i + j * ldc] = acc;
    }
}

TEST(KernelMath, RowMajorGemmMapsOntoColumnMajorBlasForEveryTransposeAndStride) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  const std::int64_t m = 3, n = 5, k = 4, pad = 2;  // row strides wider than the rows
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // Row-major storage: A is [m, k] (or [k, m] when transposed), rows padded.
      const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
      const std::int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
      const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
      std::vector<double> a(a_rows * lda), b(b_rows * ldb), c(m * ldc, -7.0), ref(m * ldc, -7.0);
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (std::int64_t l = 0; l < k; ++l) {
            const double av = ta ? a[l * lda + i] : a[i * lda + l];
            const double bv = tb ? b[j * ldb + l] : b[l * ldb + j];
            acc += av * bv;
          }
          ref[i * ldc + j] = acc;
        }
      const ColumnMajorGemm g = row_major_gemm_as_column_major(ta, tb, m, n, k, lda, ldb, ldc);
      EXPECT_EQ(g.m, n);
      EXPECT_EQ(g.n, m);
      EXPECT_EQ(g.k, k);
      column_major_gemm(g.transpose_first, g.transpose_second, g.m, g.n, g.k, b.data(), g.ld_first, a.data(),
                        g.ld_second, c.data(), g.ld_out);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < ldc; ++j) {
          EXPECT_NEAR(c[i * ldc + j], ref[i * ldc + j], 1e-14) << "ta=" << ta << " tb=" << tb << " at " << i << "," << j;
        }
    }
}

TEST(KernelMath, BiasChannelAndChannelElementFollowTheOuterChannelInnerLayout) {
  const std::int64_t outer = 3, channels = 4, inner = 5;
  std::map<std::int64_t, std::vector<std::int64_t>> by_channel;
  std::int64_t linear = 0;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t i = 0; i < inner; ++i, ++linear) {
        EXPECT_EQ(bias_channel(linear, channels, inner), c);
        by_channel[c].push_back(linear);
      }
  // channel_element enumerates exactly the elements of channel c, in memory order.
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t j = 0; j < outer * inner; ++j) {
      EXPECT_EQ(channel_element(c, j, channels, inner), by_channel[c][static_cast<std::size_t>(j)]);
    }
}

TEST(KernelMath, EmbeddingRowsAndVocabTargetsRespectTheShardRange) {
  EXPECT_EQ(embedding_local_row(5, 4, 3), 1);
  EXPECT_EQ(embedding_local_row(4, 4, 3), 0);
  EXPECT_EQ(embedding_local_row(7, 4, 3), -1);
  EXPECT_EQ(embedding_local_row(3, 4, 3), -1);
  EXPECT_EQ(embedding_local_row(-1, 0, 3), -1);
  EXPECT_EQ(vocab_target_column(9, 8, 4, -100), 1);
  EXPECT_EQ(vocab_target_column(12, 8, 4, -100), -1);
  EXPECT_EQ(vocab_target_column(7, 8, 4, -100), -1);
  EXPECT_EQ(vocab_target_column(-100, 8, 4, -100), -1);
  EXPECT_EQ(vocab_target_column(8, 8, 4, 8), -1);  // ignore_index wins even inside the shard
  EXPECT_EQ(attention_keys(0, 5, true), 1);
  EXPECT_EQ(attention_keys(4, 5, true), 5);
  EXPECT_EQ(attention_keys(2, 5, false), 5);
}

TEST(KernelMath, BlockGlobalIndexMatchesNestedLoopsForStridedBlocks) {
  const Shape global = {5, 6, 7};
  const Shape offset = {1, 2, 3};
  const Shape local_shape = {3, 2, 4};
  const std::int64_t global_strides[3] = {42, 7, 1};
  // A local block stored with padded strides (a narrow()ed view).
  StridedLayout local;
  local.ndim = 3;
  const std::int64_t strides[3] = {20, 8, 1};
  for (int d = 0; d < 3; ++d) {
    local.shape[d] = local_shape[d];
    local.strides[d] = strides[d];
  }
  std::int64_t linear = 0;
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t l = 0; l < 4; ++l, ++linear) {
        const std::int64_t expected = (offset[0] + i) * 42 + (offset[1] + j) * 7 + (offset[2] + l);
        EXPECT_EQ(block_global_index(linear, local, offset.data(), global_strides), expected);
        EXPECT_EQ(strided_offset(linear, local), i * 20 + j * 8 + l);
      }
}

// The CUDA copy takes cudaMemcpyAsync exactly for row-major contiguous layouts: dense
// strides, extents of 1 with any stride; not a transposed, padded or broadcast one.
TEST(KernelMath, RowMajorContiguousLayouts) {
  auto layout = [](std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> strides) {
    StridedLayout l;
    l.ndim = static_cast<int>(shape.size());
    int d = 0;
    for (std::int64_t e : shape) l.shape[d++] = e;
    d = 0;
    for (std::int64_t s : strides) l.strides[d++] = s;
    return l;
  };
  EXPECT_TRUE(is_row_major_contiguous(layout({}, {})));
  EXPECT_TRUE(is_row_major_contiguous(layout({3, 4, 5}, {20, 5, 1})));
  EXPECT_TRUE(is_row_major_contiguous(layout({3, 1, 5}, {5, 99, 1})));
  EXPECT_FALSE(is_row_major_contiguous(layout({3, 4}, {1, 3})));   // transposed
  EXPECT_FALSE(is_row_major_contiguous(layout({3, 4}, {8, 1})));   // padded rows (narrowed)
  EXPECT_FALSE(is_row_major_contiguous(layout({3, 4}, {0, 1})));   // broadcast rows
}

// The host initialiser uses uniform_in for uniforms: element g of a block is exactly
// uniform_in(a, b, uniform53(philox block g)), the value the CUDA kernel computes.
TEST(KernelMath, HostUniformInitIsTheSharedFormula) {
  const Shape global = {6, 10};
  Tensor block = Tensor::empty({3, 4}, DType::f64);
  const Shape offset = {2, 5};
  tessera::initialize(block, global, offset, InitSpec::uniform(-0.75, 1.25), 1234, "layers.0.w");
  const std::uint64_t key = philox_stream_key(1234, tessera::name_key("layers.0.w"));
  const auto values = block.to_vector<double>();
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 4; ++j) {
      const auto g = static_cast<std::uint64_t>((offset[0] + i) * 10 + offset[1] + j);
      const Philox4x32 r = philox_element_block(key, g);
      EXPECT_EQ(values[static_cast<std::size_t>(i * 4 + j)], uniform_in(-0.75, 1.25, uniform53(r.v[0], r.v[1])));
    }
  // The FMA-free formula rounds twice, like the plain expression on the host.
  EXPECT_EQ(uniform_in(-0.0, 0.0, 0.5), -0.0 + (0.0 - -0.0) * 0.5);
}

// im2col_source against a direct evaluation, and col2im_entry as its exact inverse:
// every (x element, tap) pair col2im gathers is an entry im2col filled from that element.
TEST(KernelMath, Im2colSourceAndCol2imEntryAreConsistent) {
  for (int variant = 0; variant < 3; ++variant) {
    Im2colGeometry g;
    g.c_in = 2;
    g.h = 5;
    g.w = 6;
    g.kh = 3;
    g.kw = 2;
    g.stride_h = variant == 1 ? 2 : 1;
    g.stride_w = variant == 2 ? 2 : 1;
    g.pad_h = 1;
    g.pad_w = variant == 0 ? 0 : 1;
    g.dil_h = variant == 2 ? 2 : 1;
    g.dil_w = 1;
    g.oh = (g.h + 2 * g.pad_h - g.dil_h * (g.kh - 1) - 1) / g.stride_h + 1;
    g.ow = (g.w + 2 * g.pad_w - g.dil_w * (g.kw - 1) - 1) / g.stride_w + 1;
    const std::int64_t entries = g.c_in * g.kh * g.kw * g.oh * g.ow;
    std::map<std::int64_t, int> reads;  // x element -> entries reading it
    std::int64_t e = 0;
    for (std::int64_t c = 0; c < g.c_in; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j)
          for (std::int64_t oy = 0; oy < g.oh; ++oy)
            for (std::int64_t ox = 0; ox < g.ow; ++ox, ++e) {
              const std::int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
              const std::int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
              const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
              const std::int64_t expected = inside ? (c * g.h + iy) * g.w + ix : -1;
              ASSERT_EQ(im2col_source(e, g), expected) << "variant " << variant << " entry " << e;
              if (inside) {
                EXPECT_EQ(col2im_entry(c, iy, ix, i, j, g), e);
                ++reads[expected];
              }
            }
    ASSERT_EQ(e, entries);
    // The gather visits exactly the entries that read each element, no more.
    for (std::int64_t c = 0; c < g.c_in; ++c)
      for (std::int64_t iy = 0; iy < g.h; ++iy)
        for (std::int64_t ix = 0; ix < g.w; ++ix) {
          int hits = 0;
          for (std::int64_t i = 0; i < g.kh; ++i)
            for (std::int64_t j = 0; j < g.kw; ++j) {
              const std::int64_t entry = col2im_entry(c, iy, ix, i, j, g);
              if (entry < 0) continue;
              ASSERT_LT(entry, entries);
              EXPECT_EQ(im2col_source(entry, g), (c * g.h + iy) * g.w + ix);
              ++hits;
            }
          EXPECT_EQ(hits, reads[(c * g.h + iy) * g.w + ix]);
        }
  }
}

}  // namespace
