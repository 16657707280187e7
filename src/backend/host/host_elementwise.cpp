// HostCompute, element-wise family: GELU/SiLU and their derivatives, SwiGLU, casts.
// Each element is evaluated in double and rounded once, so the f32 result is the
// correctly rounded f64 one (and a tensor-parallel shard computes bit-for-bit what the
// serial layer computes on the same elements).

#include <cmath>
#include <type_traits>

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"

namespace tessera::detail {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double gelu_value(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
double gelu_derivative(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
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

template <class T>
void map_forward(double (*fn)(double), const void* x, void* y, std::int64_t n) {
  const T* in = static_cast<const T*>(x);
  T* out = static_cast<T*>(y);
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(fn(static_cast<double>(in[i])));
}

template <class T>
void map_backward(double (*dfn)(double), const void* dy, const void* x, void* dx, std::int64_t n) {
  const T* in = static_cast<const T*>(x);
  const T* g = static_cast<const T*>(dy);
  T* out = static_cast<T*>(dx);
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(static_cast<double>(g[i]) * dfn(static_cast<double>(in[i])));
  }
}

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
  double (*fn)(double) = kind == Activation::gelu ? gelu_value : silu_value;
  for_float(dtype, [&](auto tag) { map_forward<decltype(tag)>(fn, x, y, n); });
}

void HostCompute::activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx,
                                      std::int64_t n, int) {
  double (*dfn)(double) = kind == Activation::gelu ? gelu_derivative : silu_derivative;
  for_float(dtype, [&](auto tag) { map_backward<decltype(tag)>(dfn, dy, x, dx, n); });
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
