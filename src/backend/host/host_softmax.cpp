// HostCompute, cross-entropy family: the per-row pieces of the vocab-parallel
// cross-entropy over logits x [n, v] (a shard of the vocabulary starting at column
// `first`), accumulated in double.

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

void HostCompute::row_max(DType dtype, const void* x_, std::int64_t n, std::int64_t v, double* out, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_);
    for (std::int64_t i = 0; i < n; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < v; ++j) m = std::max(m, static_cast<double>(x[i * v + j]));
      out[i] = m;
    }
  });
}

void HostCompute::sum_exp_and_target(DType dtype, const void* x_, const std::int64_t* t, std::int64_t n,
                                     std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                     const double* mx, double* sum_exp, double* target_logit, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_);
    for (std::int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < v; ++j) s += std::exp(static_cast<double>(x[i * v + j]) - mx[i]);
      sum_exp[i] = s;
      const bool here = t[i] != ignore_index && t[i] >= first && t[i] < first + v;
      target_logit[i] = here ? static_cast<double>(x[i * v + (t[i] - first)]) : 0.0;
    }
  });
}

// d loss / d x_ij = (softmax_ij - [first + j == target_i]) / denom, zero for ignored rows.
void HostCompute::cross_entropy_grad(DType dtype, const void* x_, const std::int64_t* t, std::int64_t n,
                                     std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                     const double* mx, const double* sum_exp, double denom, void* grad, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_);
    T* g = static_cast<T*>(grad);
    for (std::int64_t i = 0; i < n; ++i) {
      if (t[i] == ignore_index) {
        std::fill(g + i * v, g + (i + 1) * v, T(0));
        continue;
      }
      for (std::int64_t j = 0; j < v; ++j) {
        double p = std::exp(static_cast<double>(x[i * v + j]) - mx[i]) / sum_exp[i];
        if (first + j == t[i]) p -= 1.0;
        g[i * v + j] = static_cast<T>(p / denom);
      }
    }
  });
}

}  // namespace tessera::detail
