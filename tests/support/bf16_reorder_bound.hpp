#pragma once
// What the mixed-precision tests (tests/nn, tp, domain and cuda *_mixed_precision) share:
// the bf16 rounding of an operand, and the bound on two evaluations of the same
// bf16-mixed GEMMs that differ only in the order of their fp32 sums.
//
// A bf16-mixed GEMM multiplies bf16 operands exactly in fp32 (8 x 8 significant bits fit
// in 24). Any order of an fp32 sum of n terms is within gamma_n * S of the exact sum,
// S = the sum of the terms' magnitudes, gamma_n = n u / (1 - n u), u = 2^-24; two orders
// are therefore within 2 gamma_n S of each other, elementwise. S is the same layer run in
// f64 on the magnitudes of the rounded operands (bf16_magnitude).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../tp/tp_test_util.hpp"
#include "tessera/ops.hpp"

namespace tessera::testing {

// x rounded to bf16 (nearest even) and widened back: the operand a bf16-mixed GEMM reads.
inline Tensor bf16_rounded(const Tensor& x) { return ops::cast(ops::cast(x, DType::bf16), DType::f32); }

// |x| as an f64 host tensor (its GEMMs' sums of bf16 products are exact to 53 bits).
inline Tensor magnitude(const Tensor& x) {
  std::vector<double> v = as_doubles(x);
  for (double& e : v) e = std::abs(e);
  return Tensor::from_vector(v, x.shape());
}

// |bf16_rounded(x)|: the magnitudes of a GEMM operand (a bias is added unrounded: magnitude).
inline Tensor bf16_magnitude(const Tensor& x) { return magnitude(bf16_rounded(x)); }

// gamma_n = n u / (1 - n u), u = 2^-24 (fp32 round to nearest).
inline double fp32_gamma(std::int64_t terms) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(terms) * u / (1.0 - static_cast<double>(terms) * u);
}

// |got - want| <= 2 * unit_factor * gamma_terms * magnitude, elementwise; got is f32.
// unit_factor > 1 where an accumulator may truncate instead of rounding (tensor cores).
inline ::testing::AssertionResult within_reorder_bound(const Tensor& got, const Tensor& want, const Tensor& magnitude,
                                                       std::int64_t terms, double unit_factor = 1.0) {
  if (got.shape() != want.shape() || got.shape() != magnitude.shape()) {
    return ::testing::AssertionFailure() << "shapes " << shape_str(got.shape()) << ", " << shape_str(want.shape())
                                         << ", " << shape_str(magnitude.shape());
  }
  if (got.dtype() != DType::f32) return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype());
  const auto g = as_doubles(got), w = as_doubles(want), s = as_doubles(magnitude);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = 2 * unit_factor * fp32_gamma(terms) * s[i];
    if (!(std::abs(g[i] - w[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i] << " (bound " << tol
                                           << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// max |a - b| / max |b|: how far a bf16-mixed result is from the plain fp32 one.
inline double max_relative_difference(const Tensor& a, const Tensor& b) {
  const auto x = as_doubles(a), y = as_doubles(b);
  double d = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return d / scale;
}

// ||a - b|| / ||b|| (L2), for models whose chained GEMMs admit no elementwise bound.
inline double relative_l2(const Tensor& a, const Tensor& b) {
  const auto x = as_doubles(a), y = as_doubles(b);
  double d = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    d += (x[i] - y[i]) * (x[i] - y[i]);
    n += y[i] * y[i];
  }
  return std::sqrt(d / n);
}

}  // namespace tessera::testing
