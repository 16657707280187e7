#pragma once
// The row norm of max_norm (PyTorch nn.Embedding's renormalisation), as host/device
// inline functions both backends call, so a row split over ranks combines exactly like
// a whole one: each part reduces its elements' terms to a partial, the parts' partials
// combine by the same reduction (sum, max or min), and the norm is finished once.
//
//   norm_type p     term of x      partials combine by   norm
//   finite, != 0    |x|^p          sum                   partial^(1/p)
//   0               x != 0         sum                   partial (the count)
//   +inf            |x|            max                   partial
//   -inf            |x|            min                   partial

#include <cmath>

#include "tessera/detail/host_device.hpp"

namespace tessera::detail {

TESSERA_HOST_DEVICE inline bool embedding_norm_is_inf(double p) { return p == INFINITY || p == -INFINITY; }

TESSERA_HOST_DEVICE inline double embedding_norm_term(double x, double p) {
  const double a = fabs(x);
  if (p == 2.0) return a * a;
  if (p == 1.0 || embedding_norm_is_inf(p)) return a;
  if (p == 0.0) return a != 0.0 ? 1.0 : 0.0;
  return pow(a, p);
}

// -1: min (p = -inf), 1: max (p = +inf), 0: sum.
TESSERA_HOST_DEVICE inline int embedding_norm_reduction_kind(double p) {
  return embedding_norm_is_inf(p) ? (p > 0 ? 1 : -1) : 0;
}

// The partial of an empty part: the identity of the reduction.
TESSERA_HOST_DEVICE inline double embedding_norm_identity(double p) { return p == -INFINITY ? INFINITY : 0.0; }

TESSERA_HOST_DEVICE inline double embedding_norm_combine(double a, double b, double p) {
  const int kind = embedding_norm_reduction_kind(p);
  if (kind > 0) return a > b ? a : b;
  if (kind < 0) return a < b ? a : b;
  return a + b;
}

TESSERA_HOST_DEVICE inline double embedding_norm_finish(double partial, double p) {
  if (p == 2.0) return sqrt(partial);
  if (p == 1.0 || p == 0.0 || embedding_norm_is_inf(p)) return partial;
  return pow(partial, 1.0 / p);
}

// The factor a row of this norm is multiplied by: max_norm / (norm + 1e-7) when the
// norm exceeds max_norm (the 1e-7 is PyTorch's), else 1.
TESSERA_HOST_DEVICE inline double embedding_renorm_scale(double norm, double max_norm) {
  return norm > max_norm ? max_norm / (norm + 1e-7) : 1.0;
}

}  // namespace tessera::detail
