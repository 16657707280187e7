#pragma once
// The standard normal distribution's CDF and its inverse (the quantile, "ndtri"), for
// inverse-CDF sampling of truncated normals (init.hpp's trunc_normal). Inline and
// host/device so a CUDA initialisation kernel computes the same values.
//
// The quantile starts from Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4) and polishes
// it with three cubically converging Halley steps: in the tails on the tail probability
// Q(x) = erfc(x/sqrt2)/2, which erfc gives to full relative precision far out; in the
// centre on erf, so small quantiles keep their relative precision too.

#include <cmath>

#include "tessera/detail/host_device.hpp"

namespace tessera::detail {

// Phi(x) = P[Z <= x], accurate in relative terms for x <= 0 (the lower tail).
TESSERA_HOST_DEVICE inline double normal_cdf(double x) {
  return 0.5 * erfc(-x * 0.70710678118654752440);
}

// x with Phi(x) = p, for p in [0, 1]: -inf at 0, +inf at 1, NaN for p outside [0, 1].
TESSERA_HOST_DEVICE inline double normal_quantile(double p) {
  if (!(p >= 0.0 && p <= 1.0)) return NAN;
  if (p == 0.0) return -INFINITY;
  if (p == 1.0) return INFINITY;
  if (p == 0.5) return 0.0;
  const bool upper = p > 0.5;
  const double r = upper ? 1.0 - p : p;  // tail probability in (0, 0.5); exact (Sterbenz)
  // x > 0 with Q(x) = r, to A&S 26.2.23's 4.5e-4.
  const double t = sqrt(-2.0 * log(r));
  double x = t - (2.515517 + t * (0.802853 + t * 0.010328)) /
                     (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  constexpr double kSqrt2 = 1.41421356237309504880;
  if (r > 0.25) {
    // Central region: Q(x) near 1/2 carries only absolute precision, which would cost
    // the relative precision of a small x. Solve erf(y) = q = |2p - 1| instead (exact
    // for p in [1/4, 3/4], and erf is relatively accurate near 0); x = sqrt2 * y.
    const double q = upper ? 2.0 * p - 1.0 : 1.0 - 2.0 * p;
    double y = x / kSqrt2;
    for (int i = 0; i < 3; ++i) {
      const double h = (erf(y) - q) / (1.12837916709551257390 * exp(-y * y));  // f / f'
      y -= h / (1.0 + y * h);  // Halley: f'' = -2y f'
    }
    x = kSqrt2 * y;
  } else {
    for (int i = 0; i < 3; ++i) {
      const double density = kInvSqrt2Pi * exp(-0.5 * x * x);
      if (!(density > 0.0)) break;  // so far out that the start is as good as it gets
      const double u = (0.5 * erfc(x / kSqrt2) - r) / density;
      // Halley for f = Q - r, f' = -density, f'' = x * density.
      x += u / (1.0 - 0.5 * x * u);
    }
  }
  return upper ? x : -x;
}

}  // namespace tessera::detail
