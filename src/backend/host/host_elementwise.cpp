// HostCompute, element-wise family: GELU/SiLU and their derivatives, SwiGLU, casts.
// Each element is evaluated in double and rounded once, so the f32 result is the f64
// one rounded (and a tensor-parallel shard computes bit-for-bit what the serial layer
// computes on the same elements: every element goes through the same operations,
// wherever it sits in the tensor).
//
// GELU is the MLP's activation, so its loops vectorise: the standard normal's CDF and
// density come from a branch-free formula (one exp, one division, one polynomial)
// instead of libm's erf and exp per element, and the loops are compiled for AVX-512 and
// AVX2 beside the baseline ISA (the clone matching the CPU is picked at load time). No
// clone contracts a * b + c into an FMA, so all of them give the same bits. Accuracy
// (tests/nn/test_gelu_accuracy.cpp): the f32 result is the correctly rounded GELU of its
// input (libm's 0.5 x (1 + erf(x / sqrt2)) was not for x < 0, where 1 + erf cancels);
// f64 within 1e-13 relative.

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

// No contraction of a * b + c into FMA in the GELU code: the AVX-512 clone (whose ISA has
// FMA) must round exactly as the others, so every machine computes the same bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// a[0] + a[1] x + ... + a[N-1] x^(N-1) by Estrin's scheme: a tree of depth log2 N rather
// than Horner's chain of N dependent steps (these loops are otherwise latency-bound).
// `powers[k]` holds x^(2^k).
template <std::size_t Offset, std::size_t Count, std::size_t N>
inline double estrin(const double (&a)[N], const double* powers) {
  if constexpr (Count == 1) {
    return a[Offset];
  } else {
    constexpr std::size_t half = std::bit_floor(Count - 1);  // the largest power of two below Count
    return estrin<Offset, half>(a, powers) + powers[std::countr_zero(half)] * estrin<Offset + half, Count - half>(a, powers);
  }
}

template <std::size_t N>
inline double polynomial(const double (&a)[N], double x) {
  constexpr int levels = std::bit_width(N - 1);
  double powers[levels > 0 ? levels : 1] = {x};
  for (int k = 1; k < levels; ++k) powers[k] = powers[k - 1] * powers[k - 1];
  return estrin<0, N>(a, powers);
}

// a where the sign bit of s is set (s < 0, or -0, or a NaN with the bit set), b elsewhere:
// an integer blend, which vectorises where a conditional expression on doubles does not
// (GCC will not if-convert floating-point code under -ftrapping-math).
inline double select_negative(double s, double a, double b) {
  const std::uint64_t mask = 0 - (std::bit_cast<std::uint64_t>(s) >> 63);
  return std::bit_cast<double>((std::bit_cast<std::uint64_t>(a) & mask) | (std::bit_cast<std::uint64_t>(b) & ~mask));
}

// ---- exp(y) for y <= 0 (and NaN), branch-free so that loops over it vectorise.
// y = k ln2 + r with |r| <= ln2/2 (Cody-Waite, fdlibm's split of ln2), exp(r) by its
// Taylor polynomial of degree 12 (truncation < 2e-16 relative), 2^k applied as two
// factors so that subnormal results come out right; below -746 the result is 0.
constexpr double kRoundShift = 6755399441055744.0;  // 1.5 * 2^52: x + shift rounds x to an integer
constexpr double kExpTaylor[] = {1.0,         1.0,          1.0 / 2,        1.0 / 6,         1.0 / 24,
                                 1.0 / 120,   1.0 / 720,    1.0 / 5040,     1.0 / 40320,     1.0 / 362880,
                                 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};

// 2^k for an integer k in [-1022, 1023] held as `shifted` = k + kRoundShift: the low bits
// of its representation are k, so (bits + 1023) << 52 is the representation of 2^k.
inline double pow2_from_shifted(double shifted) {
  return std::bit_cast<double>((std::bit_cast<std::uint64_t>(shifted) + 1023u) << 52);
}

inline double exp_nonpositive(double y) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  y = select_negative(y + 746.0, -746.0, y);
  const double k = (y * kLog2e + kRoundShift) - kRoundShift;
  const double r = (y - k * kLn2Hi) - k * kLn2Lo;
  const double k1_shifted = k * 0.5 + kRoundShift;  // k1 = round(k / 2), k2 = k - k1
  const double k2_shifted = (k - (k1_shifted - kRoundShift)) + kRoundShift;
  return polynomial(kExpTaylor, r) * pow2_from_shifted(k1_shifted) * pow2_from_shifted(k2_shifted);
}

// ---- erfc(z) for z >= 0 as exp(-z^2) t K(u), t = 3 / (3 + z), u = 2t - 1 = (3 - z) / (3 + z):
// K = erfcx(z) / t is smooth and bounded on [0, inf) (from 1 at z = 0 to 1 / (3 sqrt(pi))).
// Its Chebyshev series in u (fitted at 48 points in 50-digit arithmetic, cut where the
// terms fall below 1e-16) is written out here as a polynomial in u, whose coefficients
// sum to 1.003 in absolute value, so evaluating it in double costs no accuracy: the
// relative error of K is below 5e-16 on the whole half-line.
constexpr double kErfcxPolynomial[] = {
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

struct StandardNormal {
  double cdf;      // Phi(x)
  double density;  // phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
};

// Phi(x) = erfc(-x / sqrt2) / 2 with the erfc above: accurate (relative) in both
// tails, NaN for NaN, 0 and 1 at -inf and +inf. (Against a long-double reference: Phi
// and phi within 6e-14 relative over |x| <= 40, the error coming from x^2 rounding
// for double x; for float x, x^2 is exact.)
inline StandardNormal standard_normal(double x) {
  const double gauss = exp_nonpositive(-0.5 * (x * x));
  double z = std::fabs(x) * kInvSqrt2;
  z = select_negative(40.0 - z, 40.0, z);  // erfc(40) is 0 in double; keeps u finite at infinity
  const double u = (3.0 - z) / (3.0 + z);
  const double erfc = 0.5 * (1.0 + u) * polynomial(kErfcxPolynomial, u) * gauss;
  const double lower = 0.5 * erfc;
  return {select_negative(x, lower, 1.0 - lower), kInvSqrt2Pi * gauss};
}

// GELU(x) = x Phi(x);  d/dx = Phi(x) + x phi(x).
inline double gelu_value(double x) { return x * standard_normal(x).cdf; }
inline double gelu_derivative(double x) {
  const StandardNormal n = standard_normal(x);
  return n.cdf + x * n.density;
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

// The GELU loops, one function per dtype so that each gets its AVX2 clone.
constexpr auto kGelu = [](double v) { return gelu_value(v); };
constexpr auto kGeluDerivative = [](double v) { return gelu_derivative(v); };
TESSERA_VECTOR_CLONES void gelu_f32(const float* x, float* y, std::int64_t n) { map_forward(kGelu, x, y, n); }
TESSERA_VECTOR_CLONES void gelu_f64(const double* x, double* y, std::int64_t n) { map_forward(kGelu, x, y, n); }
TESSERA_VECTOR_CLONES void gelu_backward_f32(const float* dy, const float* x, float* dx, std::int64_t n) {
  map_backward(kGeluDerivative, dy, x, dx, n);
}
TESSERA_VECTOR_CLONES void gelu_backward_f64(const double* dy, const double* x, double* dx, std::int64_t n) {
  map_backward(kGeluDerivative, dy, x, dx, n);
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
