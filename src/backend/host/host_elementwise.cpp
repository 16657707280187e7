// HostCompute, element-wise family: GELU/SiLU and their derivatives, SwiGLU, casts.
// SiLU and SwiGLU evaluate each element in double and round once. Every element goes
// through the same operations wherever it sits in the tensor, so a tensor-parallel shard
// computes bit for bit what the serial layer computes on the same elements.
//
// GELU is the MLP's activation and is computed in the element's own precision, in loops
// that vectorise: the standard normal's CDF and density come from a branch-free formula
// (one exp, one division, one polynomial) instead of libm's erf and exp per element, and
// the loops are compiled for AVX-512 and AVX2 beside the baseline ISA (the clone matching
// the CPU is picked at load time). In f32 that is 16 elements per AVX-512 instruction and
// about 2.3 ms per 2M elements each way on the benchmark machine (libm's erf in double,
// as before: 37 ms forward, 47 ms backward). Accuracy against a long-double reference
// (tests/nn/test_gelu_accuracy.cpp): f32 within 6 ulp (nearly 9 results in 10 exact or
// within 1 ulp), f64 within 2e-15 relative. 0.5 x (1 + erf(x / sqrt2)), the usual
// formula and what this file computed before (in double, then rounded), loses relative
// accuracy as x falls below -2, where 1 + erf cancels (in double, all of it below about
// -8); here the negative tail is computed directly.

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"

// Loops worth compiling again for AVX2 and AVX-512, the loader picking the clone the CPU
// runs (GCC on x86-64 ELF targets; elsewhere the baseline ISA's vector loop only).
#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_VECTOR_CLONES
#endif

namespace tessera::detail {

namespace {

// No contraction of a * b + c into FMA in the GELU loops: the AVX-512 clone (whose ISA
// has FMA instructions) rounds exactly as the AVX2 and baseline clones, so every machine
// computes the same bits from the same build (checked: the clones agree bit for bit).
// A whole build for an FMA ISA (-march=native) may still contract the inlined helpers;
// its bits can then differ in the last place from a portable build's, but within one
// build an element's result never depends on where it sits.
// And the dynamic vectoriser cost model: at -O2 GCC's default ("very cheap") refuses any
// loop that needs a run-time check that input and output do not overlap, which is every
// loop here; unvectorised, the f32 GELU ran 25x slower than PyTorch's (31.7 vs 1.3 ms for
// 2M elements). The helpers are always_inline for the same reason: a call left in the
// loop body stops the vectoriser.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic")
#endif

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// ---- The standard normal's CDF and density, branch-free so that loops over them
// vectorise, in the element's own precision T (float: 16 lanes of AVX-512, twice as many
// as double). One algorithm for both; Real<T> holds what differs: the bit layout and
// the polynomials, each cut where its terms fall below T's precision.
//
//   Phi(x) = erfc(-x / sqrt2) / 2,  erfc(z) = exp(-z^2) t K(u)  (z >= 0),
//   t = 3 / (3 + z),  u = 2t - 1 = (3 - z) / (3 + z),  K = erfcx(z) / t,
//
// K is smooth and bounded on [0, inf) (from 1 at z = 0 to 1 / (3 sqrt(pi))); its
// Chebyshev series in u, fitted at 48 points in 50-digit arithmetic, is written out as a
// polynomial in u whose coefficients sum to 1.003 in absolute value (no cancellation).
// exp(-x^2 / 2) is taken from x split into a head with half the mantissa (its square is
// exact) and a tail, so the exponent is exact to T's precision even where x^2 / 2 is
// large: both tails of Phi stay accurate relative to their value. Measured against a
// long-double reference (tests/nn/test_gelu_accuracy.cpp): f32 GELU within 2 ulp, f64
// within 1e-15 relative.
template <class T>
struct Real;

template <>
struct Real<double> {
  using Bits = std::uint64_t;
  static constexpr int kMantissaBits = 52;
  static constexpr Bits kExponentBias = 1023;
  static constexpr double kRoundShift = 6755399441055744.0;  // 1.5 * 2^52: x + shift rounds x to an integer
  static constexpr Bits kHeadMask = ~((Bits{1} << 27) - 1);   // a 26-bit head: its square is exact
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr double kExpFloor = -746.0;  // exp below it rounds to 0
  static constexpr double kClamp = 40.0;       // beyond |x| = 40, phi is 0 and Phi 0 or 1
  // exp(r) on |r| <= ln2 / 2: Taylor to degree 12 (truncation < 2e-16 relative).
  static constexpr double kExp[] = {1.0,          1.0,           1.0 / 2,        1.0 / 6,      1.0 / 24,
                                    1.0 / 120,    1.0 / 720,     1.0 / 5040,     1.0 / 40320,  1.0 / 362880,
                                    1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};
  // K(u): 24 terms (relative error below 5e-16).
  static constexpr double kErfcx[] = {
      3.5800230236277989e-1,
      2.9446481772329448e-1,
      1.9674278570136932e-1,
      1.0348908730019441e-1,
      3.9842587095666313e-2,
      8.9424115413504719e-3,
      -4.0413887394316185e-4,
      -1.0113539986860461e-3,
      -1.8276991424949872e-4,
      9.2259271340713658e-5,
      3.5853923636812827e-5,
      -1.0132683861908936e-5,
      -5.8238574076360063e-6,
      1.5830094253678584e-6,
      9.2258296402014064e-7,
      -3.3293900476369913e-7,
      -1.3722842699705351e-7,
      7.7951226697135081e-8,
      1.6652640553590825e-8,
      -1.7060807323373566e-8,
      -1.1893885619092368e-9,
      2.8979247563452761e-9,
      2.3183140775046786e-12,
      -2.703562432063331e-10,
  };
};

template <>
struct Real<float> {
  using Bits = std::uint32_t;
  static constexpr int kMantissaBits = 23;
  static constexpr Bits kExponentBias = 127;
  static constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23
  static constexpr Bits kHeadMask = ~((Bits{1} << 12) - 1);  // a 12-bit head
  static constexpr float kLn2Hi = 0.693145751953125f;  // 16 bits: k ln2_hi is exact for |k| < 256
  static constexpr float kLn2Lo = 1.428606765330187045e-06f;
  static constexpr float kExpFloor = -104.0f;
  static constexpr float kClamp = 15.0f;
  // Taylor to degree 7 (truncation < 6e-9 relative).
  static constexpr float kExp[] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
  // K(u): 11 terms, refitted one by one after rounding the earlier ones to float
  // (relative error within 2.2 ulp of float).
  static constexpr float kErfcx[] = {
      0.35800230503082275f,
      0.29446476697921753f,
      0.19674278795719147f,
      0.10349026322364807f,
      0.03984272852540016f,
      0.008935040794312954f,
      -0.0004064712848048657f,
      -0.0009926612256094813f,
      -0.00017456790374126285f,
      7.100222865119576e-05f,
      2.4822442355798557e-05f,
  };
};

// a[0] + a[1] x + ... + a[N-1] x^(N-1). Short polynomials by Horner's rule, which rounds
// best (each step adds one term to a value of its own size); long ones (the f64 series)
// by Estrin's scheme, a tree of depth log2 N instead of a chain of N dependent steps,
// which would leave these loops waiting on latency. `powers[k]` holds x^(2^k).
template <std::size_t Offset, std::size_t Count, class T, std::size_t N>
[[gnu::always_inline]] inline T estrin(const T (&a)[N], const T* powers) {
  if constexpr (Count == 1) {
    return a[Offset];
  } else {
    constexpr std::size_t half = std::bit_floor(Count - 1);  // the largest power of two below Count
    return estrin<Offset, half>(a, powers) + powers[std::countr_zero(half)] * estrin<Offset + half, Count - half>(a, powers);
  }
}

// Both written as compile-time recursions, not loops: the vectoriser takes a loop over
// elements only when its body has no inner loops left (GCC at -O2 does not unroll them).
template <std::size_t K, class T, std::size_t N>
[[gnu::always_inline]] inline T horner(const T (&a)[N], T x) {
  if constexpr (K == N - 1) {
    return a[K];
  } else {
    return horner<K + 1>(a, x) * x + a[K];
  }
}

template <int K, class T>
[[gnu::always_inline]] inline void square_powers(T* powers) {
  if constexpr (K > 0) {
    square_powers<K - 1>(powers);
    powers[K] = powers[K - 1] * powers[K - 1];
  }
}

template <class T, std::size_t N>
[[gnu::always_inline]] inline T polynomial(const T (&a)[N], T x) {
  if constexpr (N <= 12) {
    return horner<0>(a, x);
  } else {
    constexpr int levels = std::bit_width(N - 1);
    T powers[levels] = {x};
    square_powers<levels - 1>(powers);
    return estrin<0, N>(a, powers);
  }
}

// a where the sign bit of s is set (s < 0, or -0, or a NaN with the bit set), b elsewhere:
// an integer blend, which vectorises where a conditional expression on floating-point
// values does not (GCC will not if-convert floating-point code under -ftrapping-math).
template <class T>
[[gnu::always_inline]] inline T select_negative(T s, T a, T b) {
  using Bits = typename Real<T>::Bits;
  const Bits mask = Bits{0} - (std::bit_cast<Bits>(s) >> (8 * sizeof(T) - 1));
  return std::bit_cast<T>(static_cast<Bits>((std::bit_cast<Bits>(a) & mask) | (std::bit_cast<Bits>(b) & ~mask)));
}

// 2^k for an integer k held as `shifted` = k + kRoundShift (normal range): the low bits of
// its representation are k, so (bits + bias) << mantissa bits is the representation of 2^k.
template <class T>
[[gnu::always_inline]] inline T pow2_from_shifted(T shifted) {
  using R = Real<T>;
  return std::bit_cast<T>(
      static_cast<typename R::Bits>((std::bit_cast<typename R::Bits>(shifted) + R::kExponentBias) << R::kMantissaBits));
}

// exp(hi + lo) for hi <= 0 and |lo| << 1 as value * scale: hi = k ln2 + r (Cody-Waite),
// lo joins r, exp(r) by its polynomial, value = exp(r) 2^k1 and scale = 2^k2 with
// k1 + k2 = k, both factors normal. Callers multiply by `scale` last, so nothing is
// rounded as a subnormal before the final product. Below kExpFloor, where exp rounds to
// 0, value is 0.
template <class T>
struct ScaledExp {
  T value, scale;
};

template <class T>
[[gnu::always_inline]] inline ScaledExp<T> exp_nonpositive(T hi, T lo) {
  using R = Real<T>;
  constexpr T kLog2e = static_cast<T>(1.4426950408889634074);
  const T below_floor = hi - R::kExpFloor;  // negative where the result rounds to 0
  hi = select_negative(below_floor, R::kExpFloor, hi);
  const T k = (hi * kLog2e + R::kRoundShift) - R::kRoundShift;
  const T r = ((hi - k * R::kLn2Hi) - k * R::kLn2Lo) + lo;
  const T k1_shifted = k * T(0.5) + R::kRoundShift;  // k1 = round(k / 2), k2 = k - k1
  const T k2_shifted = (k - (k1_shifted - R::kRoundShift)) + R::kRoundShift;
  const T value = polynomial(R::kExp, r) * pow2_from_shifted(k1_shifted);
  return {select_negative(below_floor, T(0), value), pow2_from_shifted(k2_shifted)};
}

// The standard normal at x, as Phi(-|x|) = lower * scale and phi(x) = density * scale
// (scale a power of two, applied last by the callers: in the far tail the values are
// subnormal while x Phi(x) may not be).
template <class T>
struct NormalTail {
  T lower, density, scale;
};

// NaN for NaN; Phi is 0 and 1 at -inf and +inf.
template <class T>
[[gnu::always_inline]] inline NormalTail<T> normal_tail(T x) {
  using R = Real<T>;
  T a = std::fabs(x);
  a = select_negative(R::kClamp - a, R::kClamp, a);  // keeps inf out of the arithmetic below
  // x^2 / 2 = head^2 / 2 (exact) + tail (head + a) / 2.
  const T head = std::bit_cast<T>(static_cast<typename R::Bits>(std::bit_cast<typename R::Bits>(a) & R::kHeadMask));
  const T tail = a - head;
  const ScaledExp<T> gauss = exp_nonpositive(T(-0.5) * (head * head), T(-0.5) * (tail * (head + a)));
  const T z = a * static_cast<T>(kInvSqrt2);
  const T u = (T(3) - z) / (T(3) + z);
  // Phi(-|x|) = erfc(z) / 2 = (1 + u) / 4 K(u) exp(-z^2).
  return {T(0.25) * (T(1) + u) * polynomial(R::kErfcx, u) * gauss.value,
          static_cast<T>(kInvSqrt2Pi) * gauss.value, gauss.scale};
}

// GELU(x) = x Phi(x);  d/dx = Phi(x) + x phi(x). For x < 0 the tail's scale is applied
// last; for x >= 0, Phi = 1 - Phi(-x).
template <class T>
[[gnu::always_inline]] inline T gelu_value(T x) {
  const NormalTail<T> n = normal_tail(x);
  return select_negative(x, (x * n.lower) * n.scale, x * (T(1) - n.lower * n.scale));
}
template <class T>
[[gnu::always_inline]] inline T gelu_derivative(T x) {
  const NormalTail<T> n = normal_tail(x);
  const T x_density = x * n.density;
  return select_negative(x, (n.lower + x_density) * n.scale, (T(1) - n.lower * n.scale) + x_density * n.scale);
}

// Never evaluates exp of a large positive argument, so no overflow for very negative x.
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}
double silu_value(double x) { return x * sigmoid(x); }
// d/dx [x s(x)] = s(x) (1 + x (1 - s(x)))
double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

// y = f(x) and dx = dy f'(x), element by element in double.
template <class T, class Fn>
inline void map_forward(Fn fn, const T* in, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(fn(static_cast<double>(in[i])));
}

template <class T, class Fn>
inline void map_backward(Fn dfn, const T* g, const T* in, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(static_cast<double>(g[i]) * dfn(static_cast<double>(in[i])));
  }
}

// The GELU loops, in the element's precision, one function per dtype so that each gets
// its clones.
template <class T>
[[gnu::always_inline]] inline void gelu_loop(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_value(x[i]);
}
template <class T>
[[gnu::always_inline]] inline void gelu_backward_loop(const T* dy, const T* x, T* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_derivative(x[i]);
}
TESSERA_VECTOR_CLONES void gelu_f32(const float* x, float* y, std::int64_t n) { gelu_loop(x, y, n); }
TESSERA_VECTOR_CLONES void gelu_f64(const double* x, double* y, std::int64_t n) { gelu_loop(x, y, n); }
TESSERA_VECTOR_CLONES void gelu_backward_f32(const float* dy, const float* x, float* dx, std::int64_t n) {
  gelu_backward_loop(dy, x, dx, n);
}
TESSERA_VECTOR_CLONES void gelu_backward_f64(const double* dy, const double* x, double* dx, std::int64_t n) {
  gelu_backward_loop(dy, x, dx, n);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

template <class To, class From>
void cast_typed(const void* src, void* dst, std::int64_t n) {
  const From* in = static_cast<const From*>(src);
  To* out = static_cast<To*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, bfloat16>) {
      out[i] = bfloat16(static_cast<float>(in[i]));  // f64 -> f32 -> bf16, as tessera::bfloat16 does
    } else if constexpr (std::is_same_v<From, bfloat16>) {
      out[i] = static_cast<To>(static_cast<float>(in[i]));  // exact
    } else {
      out[i] = static_cast<To>(in[i]);
    }
  }
}

template <class To>
void cast_from(DType src_dtype, const void* src, void* dst, std::int64_t n) {
  switch (src_dtype) {
    case DType::f32: cast_typed<To, float>(src, dst, n); break;
    case DType::f64: cast_typed<To, double>(src, dst, n); break;
    default: cast_typed<To, bfloat16>(src, dst, n); break;
  }
}

}  // namespace

void HostCompute::activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n, int) {
  if (kind == Activation::gelu) {
    if (dtype == DType::f32) {
      gelu_f32(static_cast<const float*>(x), static_cast<float*>(y), n);
    } else {
      gelu_f64(static_cast<const double*>(x), static_cast<double*>(y), n);
    }
    return;
  }
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    map_forward(silu_value, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

void HostCompute::activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx,
                                      std::int64_t n, int) {
  if (kind == Activation::gelu) {
    if (dtype == DType::f32) {
      gelu_backward_f32(static_cast<const float*>(dy), static_cast<const float*>(x), static_cast<float*>(dx), n);
    } else {
      gelu_backward_f64(static_cast<const double*>(dy), static_cast<const double*>(x), static_cast<double*>(dx), n);
    }
    return;
  }
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    map_backward(silu_derivative, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), n);
  });
}

void HostCompute::swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    T* out = static_cast<T*>(y);
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]);
      out[i] = static_cast<T>(gi * sigmoid(gi) * static_cast<double>(u[i]));
    }
  });
}

void HostCompute::swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate,
                                  void* dup, std::int64_t n, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    const T* d_y = static_cast<const T*>(dy);
    T* dg = static_cast<T*>(dgate);
    T* du = static_cast<T*>(dup);
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]);
      const double s = sigmoid(gi);
      const double d = static_cast<double>(d_y[i]);
      // d silu(g)/dg = s (1 + g (1 - s))
      dg[i] = static_cast<T>(d * static_cast<double>(u[i]) * s * (1.0 + gi * (1.0 - s)));
      du[i] = static_cast<T>(d * gi * s);
    }
  });
}

void HostCompute::cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int) {
  switch (dst_dtype) {
    case DType::f32: cast_from<float>(src_dtype, src, dst, n); break;
    case DType::f64: cast_from<double>(src_dtype, src, dst, n); break;
    default: cast_from<bfloat16>(src_dtype, src, dst, n); break;
  }
}

}  // namespace tessera::detail
