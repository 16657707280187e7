// GELU on the host: the vectorised formula (backend/host/host_elementwise.cpp), computed
// in the element's precision, against a long-double reference over the whole range, its
// special values, and its independence of where an element sits in the tensor (a
// tensor-parallel shard, or an element in a loop's vector body or scalar tail, gets the
// same bits).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "nn_test_util.hpp"
#include "tessera/nn/functional.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

long double phi_cdf(long double x) { return 0.5L * std::erfc(-x / std::sqrt(2.0L)); }
long double phi_density(long double x) {
  return std::exp(-0.5L * x * x) / std::sqrt(2.0L * 3.141592653589793238462643383279502884L);
}

// Distance in units in the last place between two finite floats of the same sign.
std::int64_t ulps(float a, float b) {
  std::int32_t ia = 0, ib = 0;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return (a == b) ? 0 : std::numeric_limits<std::int64_t>::max();
  return std::abs(static_cast<std::int64_t>(ia) - static_cast<std::int64_t>(ib));
}

// x in [-16, 16] (both tails of f32 GELU) plus the small values around 0.
std::vector<double> sweep(std::int64_t n) {
  std::vector<double> v = random_values(n, 901);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] *= (i % 4 == 0) ? 0.01 : 16.0;
  return v;
}

}  // namespace

TEST(GeluHost, F32WithinSixUlp) {
  const std::vector<double> xs = sweep(200000);
  Tensor x = make_tensor(xs, {static_cast<std::int64_t>(xs.size())}, DType::f32);
  const std::vector<float> xf = x.to_vector<float>();
  const std::vector<float> y = F::gelu(x).to_vector<float>();
  std::int64_t within_one = 0, normal = 0, worst = 0;
  for (std::size_t i = 0; i < xf.size(); ++i) {
    const long double v = xf[i];
    const long double exact = v * phi_cdf(v);
    const float rounded = static_cast<float>(exact);
    if (std::fabs(exact) >= std::numeric_limits<float>::min()) {
      ++normal;
      const std::int64_t u = ulps(y[i], rounded);
      worst = std::max(worst, u);
      if (u <= 1) ++within_one;
    } else {
      // Subnormal results (x below -13): a few of the smallest floats at most.
      EXPECT_LE(std::fabs(y[i] - exact), 16 * std::numeric_limits<float>::denorm_min()) << "gelu(" << xf[i] << ")";
    }
  }
  // Computed in f32 (exp, one division, a degree-10 polynomial, a few products): measured
  // worst 6 ulp, and nearly 9 results in 10 exact or within 1 ulp.
  EXPECT_LE(worst, 6);
  EXPECT_GE(static_cast<double>(within_one), 0.8 * static_cast<double>(normal));
}

TEST(GeluHost, F32BackwardWithinEightUlpOfItsTerms) {
  const std::vector<double> xs = sweep(100000);
  Tensor x = make_tensor(xs, {static_cast<std::int64_t>(xs.size())}, DType::f32);
  Tensor dy = random_tensor(x.shape(), DType::f32, 902, 2.0);
  const std::vector<float> xf = x.to_vector<float>(), g = dy.to_vector<float>();
  const std::vector<float> dx = F::gelu_backward(dy, x).to_vector<float>();
  for (std::size_t i = 0; i < xf.size(); ++i) {
    const long double v = xf[i];
    const long double exact = g[i] * (phi_cdf(v) + v * phi_density(v));
    // Phi(x) + x phi(x) cancels near its root x = -0.7518: bound the error by its terms.
    const long double terms = std::fabs(g[i]) * (phi_cdf(v) + std::fabs(v * phi_density(v)));
    // The derivative within 6 ulp of its terms (as GELU), then the product with dy.
    EXPECT_LE(std::fabs(dx[i] - exact), 8 * std::ldexp(terms, -24) + 16 * std::numeric_limits<float>::denorm_min())
        << "gelu'(" << xf[i] << ")";
  }
}

TEST(GeluHost, F64RelativeErrorBelow1e13) {
  std::vector<double> xs = random_values(100000, 903);
  for (double& v : xs) v *= 38.0;
  Tensor x = make_tensor(xs, {static_cast<std::int64_t>(xs.size())}, DType::f64);
  Tensor dy = make_tensor(std::vector<double>(xs.size(), 1.0), x.shape(), DType::f64);
  const std::vector<double> y = F::gelu(x).to_vector<double>();
  const std::vector<double> d = F::gelu_backward(dy, x).to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const long double v = xs[i];
    const long double ref_y = v * phi_cdf(v), ref_d = phi_cdf(v) + v * phi_density(v);
    if (std::fabs(ref_y) > 1e-300L) EXPECT_LE(std::fabs((y[i] - ref_y) / ref_y), 1e-13L) << "gelu(" << xs[i] << ")";
    // Phi(x) + x phi(x) cancels near its root x = -0.7518: relative to its terms there.
    const long double terms = phi_cdf(v) + std::fabs(v * phi_density(v));
    if (terms > 1e-300L) EXPECT_LE(std::fabs((d[i] - ref_d) / terms), 1e-13L) << "gelu'(" << xs[i] << ")";
  }
}

TEST(GeluHost, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = make_tensor({inf, -inf, nan, 0.0, -0.0, 1.0, -40.0, 40.0, -1e-30}, {9}, dtype);
    const std::vector<double> y = to_doubles(F::gelu(x));
    EXPECT_EQ(y[0], inf);
    EXPECT_TRUE(std::isnan(y[1]));  // -inf * Phi(-inf) = -inf * 0, as 0.5 x (1 + erf(x / sqrt2)) gives
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 0.0);
    EXPECT_TRUE(std::signbit(y[4]));
    EXPECT_NEAR(y[5], 0.8413447460685429, dtype == DType::f64 ? 1e-15 : 1e-7);
    EXPECT_EQ(y[6], -0.0);
    EXPECT_EQ(y[7], 40.0);
    EXPECT_NEAR(y[8], -0.5e-30, 1e-37);
    const std::vector<double> d = to_doubles(F::gelu_backward(make_tensor(std::vector<double>(9, 1.0), {9}, dtype), x));
    EXPECT_TRUE(std::isnan(d[2]));
    EXPECT_EQ(d[3], 0.5);
    EXPECT_EQ(d[6], 0.0);
    EXPECT_EQ(d[7], 1.0);
  }
}

TEST(GeluHost, SameBitsWhereverAnElementSits) {
  // Slices starting at every offset up to 17 move each element between a vector body and
  // a scalar tail of the loop: the bits must not change (tensor-parallel shards rely on it).
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_tensor({1000}, dtype, 904, 6.0);
    Tensor dy = random_tensor({1000}, dtype, 905);
    const std::vector<double> y = to_doubles(F::gelu(x));
    const std::vector<double> d = to_doubles(F::gelu_backward(dy, x));
    for (std::int64_t offset = 1; offset <= 17; ++offset) {
      const std::int64_t n = 1000 - offset - (offset % 5);
      Tensor xs = x.narrow(0, offset, n).contiguous();
      Tensor dys = dy.narrow(0, offset, n).contiguous();
      const std::vector<double> ys = to_doubles(F::gelu(xs));
      const std::vector<double> ds = to_doubles(F::gelu_backward(dys, xs));
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(ys[static_cast<std::size_t>(i)], y[static_cast<std::size_t>(offset + i)]) << offset << " " << i;
        ASSERT_EQ(ds[static_cast<std::size_t>(i)], d[static_cast<std::size_t>(offset + i)]) << offset << " " << i;
      }
    }
  }
}
