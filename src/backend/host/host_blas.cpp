// HostCompute, BLAS family: GEMM through CBLAS (the only file that includes the CBLAS
// header), the vector ops and the reductions as plain loops accumulating in double. Host
// BLAS threading is set here too: through OpenBLAS's calls when the build found
// OpenBLAS; any other BLAS takes its threads from its own environment variable
// (MKL_NUM_THREADS, BLIS_NUM_THREADS, OMP_NUM_THREADS).

// The build names the header (cblas.h, or mkl_cblas.h for MKL); built by hand, cblas.h.
#if defined(TESSERA_CBLAS_HEADER)
#include TESSERA_CBLAS_HEADER
#else
#include <cblas.h>
#endif
#if !defined(TESSERA_BLAS_IS_OPENBLAS)
#define TESSERA_BLAS_IS_OPENBLAS 0
#endif

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

void cblas_gemm_f32(const GemmArgs& g, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c) {
  cblas_sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k),
              static_cast<float>(g.alpha), a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb),
              static_cast<float>(g.beta), c, static_cast<blasint>(g.ldc));
}

// The BLAS's own bf16 GEMM, where the loaded BLAS exports one: OpenBLAS built with
// BUILD_BFLOAT16 has cblas_sbgemm (bf16 A and B as raw 16-bit patterns, f32 C, fp32
// accumulation); Debian's OpenBLAS 0.3.21 does not. Looked up at run time, so one build
// serves either BLAS. TESSERA_HOST_SBGEMM=0 turns it off (to measure the conversion path).
using SbgemmFn = void (*)(decltype(CblasRowMajor), decltype(CblasNoTrans), decltype(CblasNoTrans), blasint,
                          blasint, blasint, float, const std::uint16_t*, blasint, const std::uint16_t*, blasint,
                          float, float*, blasint);

SbgemmFn blas_sbgemm() {
  static const SbgemmFn fn = []() -> SbgemmFn {
    const char* env = std::getenv("TESSERA_HOST_SBGEMM");
    if (env && std::strcmp(env, "0") == 0) return nullptr;
    return reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  }();
  return fn;
}

// The rounding of bfloat16::round_to_bits (nearest even, NaN kept quiet) on the bit
// pattern of a float, kept in the upper 16 bits: written branch-free so that the loops
// below vectorise (GCC's -O2 cost model would leave them scalar; they ran at a third of
// the GEMM's time before).
inline std::uint32_t bf16_rounded_bits(std::uint32_t u) {
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return (nan ? (u | 0x00400000u) : (u + 0x7fffu + ((u >> 16) & 1u))) & 0xffff0000u;
}

#if defined(__GNUC__) && !defined(__clang__)
#define TESSERA_VECTORISE __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define TESSERA_VECTORISE
#endif

TESSERA_VECTORISE void round_to_bf16_values(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &in[i], sizeof u);
    u = bf16_rounded_bits(u);
    std::memcpy(&out[i], &u, sizeof u);
  }
}

TESSERA_VECTORISE void round_to_bf16_bits(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &in[i], sizeof u);
    out[i] = static_cast<std::uint16_t>(bf16_rounded_bits(u) >> 16);
  }
}

TESSERA_VECTORISE void widen_bf16(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &u, sizeof u);
  }
}

// Per-thread scratch for the bf16 GEMM's converted operands (slot 0: A, 1: B, 2: C),
// kept between calls and grown on demand: a fresh allocation per call cost page faults
// and a zero-fill as large as the conversion itself. It holds the largest operands a
// thread has converted (each at most the size of the f32 operand).
template <class T>
T* scratch(int slot, std::size_t count) {
  struct Slot {
    std::unique_ptr<T[]> data;
    std::size_t capacity = 0;
  };
  thread_local Slot slots[3];
  Slot& s = slots[slot];
  if (s.capacity < count) {
    s.data.reset(new T[count]);  // uninitialised: every use writes it whole first
    s.capacity = count;
  }
  return s.data.get();
}

// An operand of `count` elements as the bf16 GEMM reads it: bf16 bits for sbgemm
// (`want_bits`), or f32 holding the bf16 values for sgemm. Its source is bf16, or f32 to
// be rounded to bf16 first (GemmArgs::round_to_bf16).
const void* bf16_operand(int slot, const void* src, bool src_is_f32, std::size_t count, bool want_bits) {
  if (want_bits) {
    if (!src_is_f32) return src;
    std::uint16_t* bits = scratch<std::uint16_t>(slot, count);
    round_to_bf16_bits(static_cast<const float*>(src), bits, count);
    return bits;
  }
  float* wide = scratch<float>(slot, count);
  if (src_is_f32) {
    round_to_bf16_values(static_cast<const float*>(src), wide, count);
  } else {
    widen_bf16(static_cast<const std::uint16_t*>(src), wide, count);
  }
  return wide;
}

// bf16 x bf16 on the host (or f32 operands rounded to bf16), fp32 accumulation into an
// f32 C (as cuBLAS's bf16 GEMM with CUBLAS_COMPUTE_32F), rounded to bf16 if C is: the
// BLAS's sbgemm where it has one, else the operands widened to f32 (exact) and sgemm.
void gemm_bf16(const GemmArgs& g) {
  float* c = static_cast<float*>(g.out);
  auto* c16 = static_cast<bfloat16*>(g.out);
  const auto c_count = static_cast<std::size_t>(g.m * g.ldc);
  if (g.c == DType::bf16) {
    c = scratch<float>(2, c_count);
    widen_bf16(static_cast<const std::uint16_t*>(g.out), c, c_count);
  }
  const SbgemmFn sbgemm = blas_sbgemm();
  const auto a_count = static_cast<std::size_t>((g.transpose_a ? g.k : g.m) * g.lda);
  const auto b_count = static_cast<std::size_t>((g.transpose_b ? g.n : g.k) * g.ldb);
  const bool from_f32 = g.ab == DType::f32;  // round_to_bf16
  const void* a = bf16_operand(0, g.a, from_f32, a_count, sbgemm != nullptr);
  const void* b = bf16_operand(1, g.b, from_f32, b_count, sbgemm != nullptr);
  if (sbgemm) {
    static_assert(sizeof(bfloat16) == sizeof(std::uint16_t));
    sbgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
           static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k),
           static_cast<float>(g.alpha), static_cast<const std::uint16_t*>(a), static_cast<blasint>(g.lda),
           static_cast<const std::uint16_t*>(b), static_cast<blasint>(g.ldb), static_cast<float>(g.beta), c,
           static_cast<blasint>(g.ldc));
  } else {
    cblas_gemm_f32(g, static_cast<const float*>(a), g.lda, static_cast<const float*>(b), g.ldb, c);
  }
  if (g.c == DType::bf16) {
    for (std::size_t i = 0; i < c_count; ++i) c16[i] = bfloat16(c[i]);
  }
}

// y viewed as [outer, channels, inner] gets bias[c] added to channel c. The linear case
// (inner == 1) walks each row of y against the whole bias vector, which vectorises.
template <class T>
void add_bias_typed(T* y, const T* bias, std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  if (inner == 1) {
    for (std::int64_t o = 0; o < outer; ++o) {
      T* row = y + o * channels;
      for (std::int64_t c = 0; c < channels; ++c) row[c] += bias[c];
    }
    return;
  }
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t c = 0; c < channels; ++c) {
      T* row = y + (o * channels + c) * inner;
      const T b = bias[c];
      for (std::int64_t i = 0; i < inner; ++i) row[i] += b;
    }
}

// grad[c] += the sum of channel c over dy [outer, channels, inner], accumulated in double
// in (outer, inner) order. The linear case (inner == 1) adds whole rows of dy into a
// block of double accumulators (same order per channel, so the same sums), reading dy
// row by row instead of down its columns, and vectorises.
template <class T>
void bias_grad_typed(const T* dy, T* grad, std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  if (inner == 1) {
    constexpr std::int64_t kBlock = 512;  // 4 KiB of accumulators: they stay in L1
    double acc[kBlock];
    for (std::int64_t c0 = 0; c0 < channels; c0 += kBlock) {
      const std::int64_t width = std::min(kBlock, channels - c0);
      for (std::int64_t c = 0; c < width; ++c) acc[c] = 0.0;
      for (std::int64_t o = 0; o < outer; ++o) {
        const T* row = dy + o * channels + c0;
        for (std::int64_t c = 0; c < width; ++c) acc[c] += static_cast<double>(row[c]);
      }
      for (std::int64_t c = 0; c < width; ++c) grad[c0 + c] += static_cast<T>(acc[c]);
    }
    return;
  }
  for (std::int64_t c = 0; c < channels; ++c) {
    double acc = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      const T* row = dy + (o * channels + c) * inner;
      for (std::int64_t i = 0; i < inner; ++i) acc += row[i];
    }
    grad[c] += static_cast<T>(acc);
  }
}

// Widened element (bf16 and f32 go through float first, as clipping always did).
template <class T>
double squared(T x) {
  const double v = static_cast<double>(static_cast<float>(x));
  return v * v;
}
template <>
double squared<double>(double x) {
  return x * x;
}

template <class T>
double sum_squares_typed(const void* data, std::int64_t n) {
  const T* x = static_cast<const T*>(data);
  double acc = 0;
  for (std::int64_t i = 0; i < n; ++i) acc += squared(x[i]);
  return acc;
}

}  // namespace

void HostCompute::gemm(const GemmArgs& g, int) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    // C = beta * C: the product of empty operands is zero. f32 and bf16 inputs run sgemm,
    // whose beta is a float: round it first, so C is scaled exactly as sgemm would.
    const double beta = g.ab == DType::f64 ? g.beta : static_cast<double>(static_cast<float>(g.beta));
    scale(g.c, g.m * g.ldc, beta, g.out, 0);
    return;
  }
  if (g.ab == DType::bf16 || (g.ab == DType::f32 && g.round_to_bf16)) {
    gemm_bf16(g);
  } else if (g.ab == DType::f32) {
    cblas_gemm_f32(g, static_cast<const float*>(g.a), g.lda, static_cast<const float*>(g.b), g.ldb,
                   static_cast<float*>(g.out));
  } else {
    cblas_dgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k), g.alpha,
                static_cast<const double*>(g.a), static_cast<blasint>(g.lda), static_cast<const double*>(g.b),
                static_cast<blasint>(g.ldb), g.beta, static_cast<double*>(g.out), static_cast<blasint>(g.ldc));
  }
}

void HostCompute::axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int) {
  if (dtype == DType::f32) {
    const auto* xs = static_cast<const float*>(x);
    auto* ys = static_cast<float*>(y);
    const float a = static_cast<float>(alpha);
    for (std::int64_t i = 0; i < n; ++i) ys[i] += a * xs[i];
  } else {
    const auto* xs = static_cast<const double*>(x);
    auto* ys = static_cast<double*>(y);
    for (std::int64_t i = 0; i < n; ++i) ys[i] += alpha * xs[i];
  }
}

void HostCompute::scale(DType dtype, std::int64_t n, double alpha, void* y, int) {
  if (dtype == DType::f32) {
    // The product in double, rounded once (gradient clipping's rule); ops::scale rounds
    // alpha to float first, and the product of two floats is exact in double.
    auto* ys = static_cast<float*>(y);
    for (std::int64_t i = 0; i < n; ++i) ys[i] = static_cast<float>(ys[i] * alpha);
  } else if (dtype == DType::f64) {
    auto* ys = static_cast<double*>(y);
    for (std::int64_t i = 0; i < n; ++i) ys[i] *= alpha;
  } else {
    auto* ys = static_cast<bfloat16*>(y);
    for (std::int64_t i = 0; i < n; ++i) ys[i] = bfloat16(static_cast<float>(static_cast<float>(ys[i]) * alpha));
  }
}

void HostCompute::add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                           std::int64_t inner, int) {
  if (dtype == DType::f32) {
    add_bias_typed(static_cast<float*>(y), static_cast<const float*>(bias), outer, channels, inner);
  } else {
    add_bias_typed(static_cast<double*>(y), static_cast<const double*>(bias), outer, channels, inner);
  }
}

void HostCompute::accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer,
                                       std::int64_t channels, std::int64_t inner, int) {
  if (dtype == DType::f32) {
    bias_grad_typed(static_cast<const float*>(dy), static_cast<float*>(grad), outer, channels, inner);
  } else {
    bias_grad_typed(static_cast<const double*>(dy), static_cast<double*>(grad), outer, channels, inner);
  }
}

double HostCompute::sum(DType dtype, const void* x, std::int64_t n, int) {
  double acc = 0;
  if (dtype == DType::f32) {
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<const float*>(x)[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<const double*>(x)[i];
  }
  return acc;
}

double HostCompute::dot(DType dtype, const void* x, const void* y, std::int64_t n, int) {
  double acc = 0;
  if (dtype == DType::f32) {
    const auto* xs = static_cast<const float*>(x);
    const auto* ys = static_cast<const float*>(y);
    for (std::int64_t i = 0; i < n; ++i) acc += double(xs[i]) * ys[i];
  } else {
    const auto* xs = static_cast<const double*>(x);
    const auto* ys = static_cast<const double*>(y);
    for (std::int64_t i = 0; i < n; ++i) acc += xs[i] * ys[i];
  }
  return acc;
}

double HostCompute::sum_squares(DType dtype, const void* x, std::int64_t n, int) {
  switch (dtype) {
    case DType::f32: return sum_squares_typed<float>(x, n);
    case DType::f64: return sum_squares_typed<double>(x, n);
    default: return sum_squares_typed<bfloat16>(x, n);
  }
}

}  // namespace tessera::detail

namespace tessera::ops {

#if !TESSERA_BLAS_IS_OPENBLAS
namespace {
// What the caller asked for: a BLAS without a thread call keeps its own setting.
std::atomic<int>& requested_threads() {
  static std::atomic<int> threads{1};
  return threads;
}
}  // namespace
#endif

void set_host_threads(int threads) {
  if (threads < 1) throw InvalidArgument("ops::set_host_threads: threads must be >= 1, got " + std::to_string(threads));
#if TESSERA_BLAS_IS_OPENBLAS
  openblas_set_num_threads(threads);
#else
  requested_threads().store(threads);
#endif
}

int host_threads() noexcept {
#if TESSERA_BLAS_IS_OPENBLAS
  return openblas_get_num_threads();
#else
  return requested_threads().load();
#endif
}

}  // namespace tessera::ops
