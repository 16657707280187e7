#pragma once
// Shared helpers for the tensor-parallel tests: deterministic fills and tolerant
// comparisons of tensors against serial references.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/parameter.hpp"
#include "tessera/tensor.hpp"

namespace tessera::testing {

// A deterministic value in [-1, 1) for (salt, index): identical on every rank.
inline double pseudo_random(std::uint64_t salt, std::uint64_t index) {
  std::uint64_t z = salt * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

inline Tensor random_tensor(const Shape& shape, std::uint64_t salt, DType dtype = DType::f32) {
  const std::int64_t n = shape_numel(shape);
  if (dtype == DType::f64) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = pseudo_random(salt, i);
    return Tensor::from_vector(v, shape);
  }
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(pseudo_random(salt, i));
  return Tensor::from_vector(v, shape);
}

inline void fill_random(Parameter& p, std::uint64_t salt) { p.value.copy_from(random_tensor(p.value.shape(), salt, p.value.dtype())); }

inline std::vector<double> as_doubles(const Tensor& t) {
  const Tensor c = t.to(Device::host()).contiguous();
  if (c.dtype() == DType::f64) return c.to_vector<double>();
  const auto f = c.to_vector<float>();
  return {f.begin(), f.end()};
}

// |got - want| <= rel * max|want| elementwise (fp32 "relative 1e-5" on the scale of the
// tensor: elements near zero are not held to a relative bound of their own).
inline ::testing::AssertionResult tensors_close(const Tensor& got, const Tensor& want, double rel = 1e-5) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  }
  const auto g = as_doubles(got), w = as_doubles(want);
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  const double tol = rel * std::max(scale, 1e-30);
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i] << " (tol " << tol
                                           << ", scale " << scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing
