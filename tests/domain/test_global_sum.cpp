// domain::global_sum against its serial twin: the same bits at every decomposition of
// 1-4 ranks (latitude bands, longitude bands, 2x2), equal to the serial call on the whole
// field; the correctly rounded exact sum where it is known (cancellation that ordinary
// summation loses, subnormals, the extremes of double); NaN and infinities; f32 and bf16;
// shape errors named on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/global_sum.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;
using namespace tessera::domain;
using tessera::testing::self;
using tessera::testing::world;
using tessera::testing::world_size;

namespace {

// A field of wildly different magnitudes and signs: ordinary sums of it depend on order.
Tensor global_field(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  std::uint64_t x = 88172645463325252ull;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const int exponent = static_cast<int>(x % 120) - 60;
    const double mantissa = static_cast<double>(x >> 11) / 9007199254740992.0;
    p[i] = ((x >> 3) & 1 ? -1.0 : 1.0) * std::ldexp(mantissa + 0.5, exponent);
  }
  return t;
}

std::uint64_t bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}

double serial_sum(const Tensor& whole) {
  Decomposition one(self(), whole.shape());
  return global_sum(one, whole);
}

}  // namespace

TEST(GlobalSum, SameBitsAtEveryDecompositionAndEqualToTheSerialSum) {
  const int p = world_size();
  const Shape shape{3, 13, 18};
  const Tensor whole = global_field(shape);
  const double serial = serial_sum(whole);
  // The ordinary sum differs from the exact one for this field (so the test can tell).
  double naive = 0;
  for (std::int64_t i = 0; i < whole.numel(); ++i) naive += whole.data<double>()[i];
  EXPECT_NE(bits(naive), bits(serial));
  std::vector<ProcessGrid> grids{{p, 1}, {1, p}};
  if (p == 4) grids.push_back({2, 2});
  for (const ProcessGrid& g : grids) {
    Decomposition d(world(), shape, g);
    const Tensor local = d.scatter(whole, DType::f64);
    const double sum = global_sum(d, local);
    EXPECT_EQ(bits(sum), bits(serial)) << "grid " << g.str() << ": " << sum << " vs " << serial;
    // Through a halo-padded field's interior (a strided view).
    HaloExchange ex(d, {HaloWidths::uniform(1), true, PolePolicy::zero});
    Tensor padded = ex.allocate(DType::f64, {3});
    ex.interior(padded).copy_from(local);
    EXPECT_EQ(bits(global_sum(d, ex.interior(padded))), bits(serial)) << "grid " << g.str() << " (interior)";
  }
}

TEST(GlobalSum, CorrectlyRoundedWhereTheExactSumIsKnown) {
  Decomposition d(world(), {1, 4 * world_size()}, {1, world_size()});
  const auto sum_of = [&](std::vector<double> per_rank) {  // 4 values on every rank
    return global_sum(d, Tensor::from_vector(per_rank, {1, 4}));
  };
  const int p = world_size();
  // 1e300 + 1 - 1e300 + ...: ordinary summation gives 0 (or 1e300); exactly p.
  EXPECT_EQ(sum_of({1e300, 1.0, -1e300, 0.0}), static_cast<double>(p));
  // The smallest subnormal, p times 4: exact.
  const double tiny = std::numeric_limits<double>::denorm_min();
  EXPECT_EQ(sum_of({tiny, tiny, tiny, tiny}), 4 * p * tiny);
  // The largest double and its negation cancel; a ulp-sized remainder survives.
  const double big = std::numeric_limits<double>::max();
  EXPECT_EQ(sum_of({big, -big, 0.5, 0.25}), 0.75 * p);
  // Overflow of the exact sum rounds to +inf, as IEEE addition would.
  if (p > 1) EXPECT_EQ(sum_of({big, big, 0.0, 0.0}), std::numeric_limits<double>::infinity());
  // Rounding to nearest-even on a tie: 2^53 + 1 (a tie between 2^53 and 2^53 + 2) -> 2^53.
  if (p == 1) {
    EXPECT_EQ(sum_of({9007199254740992.0, 1.0, 0.0, 0.0}), 9007199254740992.0);
    EXPECT_EQ(sum_of({9007199254740992.0, 1.0, 1e-30, 0.0}), 9007199254740994.0);  // above the tie
    EXPECT_EQ(sum_of({-9007199254740992.0, -1.0, -1e-30, 0.0}), -9007199254740994.0);
  }
}

TEST(GlobalSum, NaNAndInfinities) {
  Decomposition d(world(), {1, 2 * world_size()}, {1, world_size()});
  const double inf = std::numeric_limits<double>::infinity();
  const bool last = d.rank() == world_size() - 1;
  EXPECT_TRUE(std::isnan(global_sum(d, Tensor::from_vector(std::vector<double>{1.0, last ? NAN : 2.0}, {1, 2}))));
  EXPECT_EQ(global_sum(d, Tensor::from_vector(std::vector<double>{1.0, last ? inf : 2.0}, {1, 2})), inf);
  EXPECT_EQ(global_sum(d, Tensor::from_vector(std::vector<double>{-inf, 2.0}, {1, 2})), -inf);
  EXPECT_TRUE(std::isnan(global_sum(d, Tensor::from_vector(std::vector<double>{-inf, last ? inf : 1.0}, {1, 2}))));
}

TEST(GlobalSum, SinglePrecisionFieldsAreSummedExactlyInDouble) {
  const int p = world_size();
  Decomposition d(world(), {2, 8 * p}, {1, p});
  std::vector<float> values(static_cast<std::size_t>(2 * 8));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = (i % 2 ? -1.0f : 1.0f) * (1e-8f + static_cast<float>(i));
  double want = 0;  // exact: small integers plus multiples of 1e-8f, all exactly representable sums in double
  for (float v : values) want += static_cast<double>(v);
  EXPECT_EQ(global_sum(d, Tensor::from_vector(values, {2, 8})), want * p);
  std::vector<bfloat16> b{bfloat16(1.5f), bfloat16(-0.25f)};
  Decomposition db(world(), {1, 2 * p}, {1, p});
  EXPECT_EQ(global_sum(db, Tensor::from_vector(b, {1, 2})), 1.25 * p);
}

TEST(GlobalSum, AWrongShapeOnOneRankIsTheSameErrorEverywhere) {
  Decomposition d(world(), {6, 8 * world_size()}, {1, world_size()});
  const Tensor good = Tensor::zeros(d.local_shape({}), DType::f64);
  const Tensor bad = Tensor::zeros({6, 9}, DType::f64);
  std::string message;
  try {
    global_sum(d, d.rank() == 0 ? bad : good);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("global_sum: domain rank 0 passed"), std::string::npos) << message;
  EXPECT_NE(message.find("expected shape [6, 8]"), std::string::npos) << message;
}
