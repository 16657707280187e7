#pragma once
// Shared helpers for the serial-layer tests: deterministic fills, conversions, and a
// central finite-difference gradient check of a Module on the loss L = <forward(x), r>.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../tp/tp_test_util.hpp"
#include "expect_error.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tensor.hpp"

namespace tessera::nn_test {

// Deterministic values in [-1, 1) from (seed, index), the tp tests' stream (splitmix64):
// every test draws the same data on every run and machine.
using testing::pseudo_random;

inline std::vector<double> random_values(std::int64_t n, std::uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = pseudo_random(seed, static_cast<std::uint64_t>(i));
  return v;
}

// A host tensor of `dtype` (f32/f64) holding `values` (rounded for f32).
inline Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (dtype == DType::f64) return Tensor::from_vector(values, shape);
  std::vector<float> f(values.begin(), values.end());
  return Tensor::from_vector(f, shape);
}

inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v = random_values(shape_numel(shape), seed);
  for (double& e : v) e *= scale;
  return make_tensor(v, shape, dtype);
}

// Any f32/f64 host tensor as doubles.
inline std::vector<double> to_doubles(const Tensor& t) {
  if (t.dtype() == DType::f64) return t.to_vector<double>();
  std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// Overwrites a host f32/f64 tensor with `values`.
inline void assign(Tensor& t, const std::vector<double>& values) { t.copy_from(make_tensor(values, t.shape(), t.dtype())); }

// Fills every parameter of `m` from a deterministic stream keyed by its position.
inline void fill_parameters(nn::Module& m, std::uint64_t seed, double scale = 0.5) {
  std::uint64_t k = 0;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<double> v = random_values(p->value.numel(), seed + 1000 * (++k));
    for (double& e : v) e *= scale;
    assign(p->value, v);
  }
}

// Copies parameter values from `src` to `dst` (same names and shapes; dtypes may differ).
inline void copy_parameters(nn::Module& src, nn::Module& dst) {
  auto s = src.named_parameters();
  auto d = dst.named_parameters();
  ASSERT_EQ(s.size(), d.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    ASSERT_EQ(s[i].first, d[i].first);
    assign(d[i].second->value, to_doubles(s[i].second->value));
  }
}

// |a - b| <= rtol * max(1, |b|) elementwise, with a message naming `what` and the index.
inline void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rtol,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double tol = rtol * std::max(1.0, std::abs(b[i]));
    EXPECT_NEAR(a[i], b[i], tol) << what << " at flat index " << i;
  }
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks dx and every parameter gradient of `m` (f64) against central differences of
// L = <m.forward(x), r> with a random projection r. `check_input` = false for layers
// whose input has no gradient (Embedding ids).
inline void check_gradients(nn::Module& m, const Tensor& x, std::uint64_t seed, bool check_input = true,
                            double eps = 1e-6, double rtol = 1e-6) {
  m.zero_grad();
  Tensor y = m.forward(x);
  const std::vector<double> r = random_values(y.numel(), seed);
  Tensor r_tensor = make_tensor(r, y.shape(), y.dtype());
  Tensor dx = m.backward(r_tensor);

  auto loss = [&]() { return dot(to_doubles(m.forward(x)), r); };

  if (check_input) {
    ASSERT_TRUE(dx.defined());
    ASSERT_EQ(dx.shape(), x.shape());
    const std::vector<double> analytic = to_doubles(dx);
    double* xs = x.data<double>();
    std::vector<double> numeric(analytic.size());
    for (std::size_t i = 0; i < numeric.size(); ++i) {
      const double keep = xs[i];
      xs[i] = keep + eps;
      const double up = loss();
      xs[i] = keep - eps;
      const double down = loss();
      xs[i] = keep;
      numeric[i] = (up - down) / (2 * eps);
    }
    expect_close(analytic, numeric, rtol, m.type_name() + " dx");
  }
  for (auto& [name, p] : m.named_parameters()) {
    const std::vector<double> analytic = to_doubles(p->grad);
    double* ps = p->value.data<double>();
    std::vector<double> numeric(analytic.size());
    for (std::size_t i = 0; i < numeric.size(); ++i) {
      const double keep = ps[i];
      ps[i] = keep + eps;
      const double up = loss();
      ps[i] = keep - eps;
      const double down = loss();
      ps[i] = keep;
      numeric[i] = (up - down) / (2 * eps);
    }
    expect_close(analytic, numeric, rtol, m.type_name() + " grad of " + name);
  }
}

// Runs forward + backward(r) twice and checks every gradient doubled (backward adds).
inline void check_accumulation(nn::Module& m, const Tensor& x, std::uint64_t seed) {
  m.zero_grad();
  Tensor y = m.forward(x);
  Tensor r = random_tensor(y.shape(), y.dtype(), seed);
  m.backward(r);
  std::vector<std::vector<double>> once;
  for (Parameter* p : m.parameters()) once.push_back(to_doubles(p->grad));
  m.forward(x);
  m.backward(r);
  std::size_t k = 0;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<double> twice = to_doubles(p->grad);
    std::vector<double> expected = once[k++];
    for (double& e : expected) e *= 2;
    expect_close(twice, expected, 1e-12, m.type_name() + " accumulated grad of " + name);
    // A non-trivial check: the gradient is not identically zero.
    EXPECT_GT(std::abs(dot(twice, twice)), 0.0) << name;
  }
}

using testing::expect_error;

}  // namespace tessera::nn_test
