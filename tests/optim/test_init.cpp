// Initialisation as a pure function of (seed, name, global index): the Philox generator
// against Random123's published known answers, the normal quantile against
// high-precision values, block-wise fills equal to whole fills bit for bit (every block
// along dim 0 and dim 1, strided destinations), per-type statistics against nn.init's
// formulas, truncation bounds, bf16/f32 as rounded f64, and errors naming the parameter.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/detail/normal_quantile.hpp"
#include "tessera/detail/philox.hpp"
#include "tessera/init.hpp"
#include "tessera/nn/module.hpp"
#include "expect_error.hpp"

using namespace tessera;
using tessera::testing::expect_error;

namespace {

std::vector<double> init_f64(const Shape& shape, const InitSpec& spec, std::uint64_t seed, const std::string& name) {
  Tensor t = Tensor::empty(shape, DType::f64);
  initialize(t, shape, Shape(shape.size(), 0), spec, seed, name);
  return t.to_vector<double>();
}

struct Moments {
  double mean = 0, std = 0, min = 0, max = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  m.min = m.max = v.at(0);
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size() - 1));
  return m;
}

// The spread of every supported random type, for the layout tests.
std::vector<std::pair<std::string, InitSpec>> random_specs() {
  return {{"normal", InitSpec::normal(0.5, 2.0)},
          {"uniform", InitSpec::uniform(-3.0, 1.0)},
          {"trunc_normal", InitSpec::trunc_normal(0.1, 1.5, -1.0, 2.0)},
          {"xavier_normal", InitSpec::xavier_normal(1.3)},
          {"xavier_uniform", InitSpec::xavier_uniform()},
          {"kaiming_normal", InitSpec::kaiming_normal(0.1, true)},
          {"kaiming_uniform", InitSpec::kaiming_uniform(std::sqrt(5.0))}};
}

}  // namespace

// ------------------------------------------------------------------------ generator pieces

TEST(Philox, MatchesRandom123KnownAnswerVectors) {
  // Random123's kat_vectors, "philox4x32 10" lines: counter (4 words), key (2 words),
  // expected output (4 words).
  struct Kat {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const detail::Philox4x32 out =
        detail::philox4x32({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], k.out[i]) << "word " << i << " of counter " << std::hex << k.ctr[0];
  }
}

TEST(Philox, ElementBlocksUseIndexAsCounterAndDifferByDraw) {
  const std::uint64_t key = 0x0123456789abcdefull;
  const std::uint64_t index = 0x00000005fffffffeull;
  const detail::Philox4x32 direct = detail::philox4x32({{0xfffffffeu, 5u, 0u, 0u}}, 0x89abcdefu, 0x01234567u);
  const detail::Philox4x32 block = detail::philox_element_block(key, index);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(block.v[i], direct.v[i]);
  const detail::Philox4x32 other = detail::philox_element_block(key, index, 1);
  EXPECT_NE(std::memcmp(block.v, other.v, sizeof block.v), 0);
}

TEST(Philox, UniformDoublesCoverTheirIntervals) {
  EXPECT_EQ(detail::uniform53(0, 0), 0.0);
  EXPECT_EQ(detail::uniform53(0xffffffffu, 0xffffffffu), 1.0 - 0x1.0p-53);
  EXPECT_EQ(detail::uniform53(0x80000000u, 0), 0.5);
  EXPECT_EQ(detail::uniform53_open(0, 0), 0x1.0p-54);
  EXPECT_EQ(detail::uniform53_open(0xffffffffu, 0xffffffffu), 1.0 - 0x1.0p-54);
  // The low bits of both words matter (53 random bits, not 32).
  EXPECT_NE(detail::uniform53(0, 0x40u), 0.0);
  EXPECT_NE(detail::uniform53(0x20u, 0), 0.0);
}

TEST(NameKey, IsFnv1a64) {
  // Published FNV-1a 64-bit test values.
  EXPECT_EQ(name_key(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(name_key("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(name_key("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(name_key("layers.0.weight"), name_key("layers.1.weight"));
}

TEST(NormalQuantile, MatchesHighPrecisionValues) {
  // Reference: the root of Phi(x) = p for the double p, at 60 digits (mpmath), using
  // x(p) = -x(1 - p) above 1/2.
  const std::pair<double, double> cases[] = {
      {1e-300, -37.047096299361199237},  {1e-100, -21.273453560965324294},
      {1e-10, -6.3613409024040561991},   {0.025, -1.9599639845400542118},
      {0.3, -0.52440051270804081597},    {0.5000001, 2.5066282733116483012e-7},
      {0.4999999, -2.5066282747031065135e-7}, {0.7, 0.52440051270804065631},
      {0.975, 1.9599639845400538556},    {0.999, 3.0902323061678132778},
      {0.9999999999990905, 7.0477002566644087254}};
  for (auto [p, x] : cases) EXPECT_NEAR(detail::normal_quantile(p), x, 4e-16 * std::abs(x)) << "p = " << p;
  EXPECT_EQ(detail::normal_quantile(0.5), 0.0);
  EXPECT_EQ(detail::normal_quantile(0.0), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(detail::normal_quantile(1.0), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(detail::normal_quantile(-0.1)));
}

TEST(NormalQuantile, InvertsTheCdfDeepIntoTheTail) {
  // Lower tail: Phi is accurate in relative terms, so the round trip is too.
  for (double x = -37.0; x <= 0.5; x += 0.0625) {
    const double p = detail::normal_cdf(x);
    EXPECT_NEAR(detail::normal_quantile(p), x, 1e-15 * std::max(1.0, std::abs(x))) << "x = " << x;
  }
  // Phi(x) has relative condition |x|^2 there, so p comes back to about x^2 ulps.
  for (double lg = -300; lg <= -1; lg += 1.0) {
    const double p = std::pow(10.0, lg);
    const double x = detail::normal_quantile(p);
    EXPECT_NEAR(detail::normal_cdf(x), p, (1 + x * x) * 1e-15 * p) << "p = 1e" << lg;
  }
}

// ------------------------------------------------------------------------------ the API

TEST(InitType, NamesRoundTripAndUnknownNamesAreConfigErrors) {
  for (InitType t : {InitType::zeros, InitType::ones, InitType::constant, InitType::normal, InitType::uniform,
                     InitType::trunc_normal, InitType::xavier_normal, InitType::xavier_uniform,
                     InitType::kaiming_normal, InitType::kaiming_uniform, InitType::orthogonal,
                     InitType::biased_normal, InitType::dirac}) {
    EXPECT_EQ(parse_init_type(init_type_name(t)), t);
  }
  EXPECT_EQ(init_type_name(InitType::xavier_normal), "xavier_normal");
  for (const char* bad : {"orthonormal", "xavier"}) {
    try {
      parse_init_type(bad, "model.init_type");
      FAIL() << bad;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.init_type"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("kaiming_uniform"), std::string::npos) << what;
    }
  }
}

TEST(ComputeFans, FollowsPyTorchRule) {
  const Fans linear = compute_fans({10, 4});
  EXPECT_EQ(linear.fan_in, 4);
  EXPECT_EQ(linear.fan_out, 10);
  const Fans conv = compute_fans({8, 4, 3, 3});
  EXPECT_EQ(conv.fan_in, 36);
  EXPECT_EQ(conv.fan_out, 72);
  EXPECT_THROW(compute_fans({5}), InvalidArgument);
  EXPECT_THROW(compute_fans({}), InvalidArgument);
}

TEST(Initialize, EveryBlockEqualsTheWholeTensorBitForBit) {
  const Shape global{7, 5};
  for (const auto& [label, spec] : random_specs()) {
    const std::vector<double> whole = init_f64(global, spec, 42, "layers.0.weight");
    // Every block [r0, r1) x [c0, c1): all splits along dim 0, along dim 1 and both,
    // uneven ones included.
    for (std::int64_t r0 = 0; r0 < 7; ++r0) {
      for (std::int64_t r1 = r0 + 1; r1 <= 7; ++r1) {
        for (std::int64_t c0 = 0; c0 < 5; ++c0) {
          for (std::int64_t c1 = c0 + 1; c1 <= 5; ++c1) {
            Tensor block = Tensor::empty({r1 - r0, c1 - c0}, DType::f64);
            initialize(block, global, {r0, c0}, spec, 42, "layers.0.weight");
            const std::vector<double> got = block.to_vector<double>();
            for (std::int64_t r = r0; r < r1; ++r) {
              for (std::int64_t c = c0; c < c1; ++c) {
                const double want = whole[static_cast<std::size_t>(r * 5 + c)];
                const double have = got[static_cast<std::size_t>((r - r0) * (c1 - c0) + (c - c0))];
                ASSERT_EQ(std::memcmp(&want, &have, sizeof want), 0)
                    << label << " block rows [" << r0 << ", " << r1 << ") cols [" << c0 << ", " << c1
                    << ") element (" << r << ", " << c << ")";
              }
            }
          }
        }
      }
    }
  }
}

TEST(Initialize, StridedDestinationsAndThreeDimBlocksMatch) {
  const Shape global{4, 6, 3};
  const InitSpec spec = InitSpec::kaiming_uniform();
  const std::vector<double> whole = init_f64(global, spec, 7, "conv.weight");
  // A view of columns [1, 4) of dim 1 inside a larger buffer: non-contiguous target.
  Tensor buffer = Tensor::zeros({4, 6, 3}, DType::f64);
  Tensor view = buffer.narrow(1, 1, 3);
  ASSERT_FALSE(view.is_contiguous());
  initialize(view, global, {0, 2, 0}, spec, 7, "conv.weight");
  const std::vector<double> buf = buffer.to_vector<double>();
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 6; ++j) {
      for (std::int64_t k = 0; k < 3; ++k) {
        const double have = buf[static_cast<std::size_t>((i * 6 + j) * 3 + k)];
        if (j >= 1 && j < 4) {
          EXPECT_EQ(have, whole[static_cast<std::size_t>((i * 6 + (j + 1)) * 3 + k)]) << i << "," << j << "," << k;
        } else {
          EXPECT_EQ(have, 0.0) << "element outside the view was written: " << i << "," << j << "," << k;
        }
      }
    }
  }
}

TEST(Initialize, DependsOnSeedAndNameAndIsReproducible) {
  const Shape shape{64, 32};
  const InitSpec spec = InitSpec::normal(0.0, 1.0);
  const auto base = init_f64(shape, spec, 1, "layers.0.weight");
  EXPECT_EQ(base, init_f64(shape, spec, 1, "layers.0.weight"));
  for (const auto& other : {init_f64(shape, spec, 2, "layers.0.weight"), init_f64(shape, spec, 1, "layers.1.weight"),
                            init_f64(shape, spec, 1 + (1ull << 32), "layers.0.weight")}) {
    int equal = 0;
    for (std::size_t i = 0; i < base.size(); ++i) equal += base[i] == other[i];
    EXPECT_EQ(equal, 0);
  }
}

TEST(Initialize, ConstantsFillExactly) {
  const std::vector<std::pair<InitSpec, double>> cases = {
      {InitSpec::zeros(), 0.0}, {InitSpec::ones(), 1.0}, {InitSpec::constant(-2.25), -2.25}};
  for (const auto& [spec, value] : cases) {
    Tensor t = Tensor::empty({3, 4}, DType::f32);
    initialize(t, {5, 4}, {2, 0}, spec, 3, "norm.weight");
    for (float v : t.to_vector<float>()) EXPECT_EQ(v, static_cast<float>(value));
  }
  Tensor scalar = Tensor::empty({}, DType::f64);
  initialize(scalar, {}, {}, InitSpec::constant(0.5), 0, "scale");
  EXPECT_EQ(scalar.to_vector<double>().at(0), 0.5);
}

TEST(Initialize, SampleStatisticsMatchTheFormulas) {
  const Shape shape{384, 256};  // fan_in 256, fan_out 384
  const double n = static_cast<double>(shape_numel(shape));
  struct Case {
    std::string label;
    InitSpec spec;
    double mean, std;
    double bound;  // > 0: uniform on [-bound, bound) around 0, or the given low/high below
  };
  const double fan_in = 256, fan_out = 384;
  const double kaiming_gain = std::sqrt(2.0 / (1.0 + 0.2 * 0.2));
  const std::vector<Case> cases = {
      {"normal", InitSpec::normal(0.5, 2.0), 0.5, 2.0, 0},
      {"xavier_normal", InitSpec::xavier_normal(1.5), 0, 1.5 * std::sqrt(2.0 / (fan_in + fan_out)), 0},
      {"kaiming_normal", InitSpec::kaiming_normal(0.2, true), 0, kaiming_gain / std::sqrt(fan_out), 0},
      {"kaiming_normal(fan_in)", InitSpec::kaiming_normal(), 0, std::sqrt(2.0 / fan_in), 0},
      {"xavier_uniform", InitSpec::xavier_uniform(0.5), 0, 0, 0.5 * std::sqrt(6.0 / (fan_in + fan_out))},
      {"kaiming_uniform", InitSpec::kaiming_uniform(0.2), 0, 0, kaiming_gain * std::sqrt(3.0 / fan_in)},
      {"kaiming_uniform(fan_out)", InitSpec::kaiming_uniform(0.0, true), 0, 0, std::sqrt(2.0) * std::sqrt(3.0 / fan_out)},
  };
  for (const Case& c : cases) {
    const auto v = init_f64(shape, c.spec, 11, "stats." + c.label);
    const Moments m = moments(v);
    const double stdev = c.bound > 0 ? c.bound / std::sqrt(3.0) : c.std;
    // Five standard errors of the estimators.
    EXPECT_NEAR(m.mean, c.mean, 5 * stdev / std::sqrt(n)) << c.label;
    EXPECT_NEAR(m.std, stdev, 5 * stdev / std::sqrt(2 * n) * (c.bound > 0 ? 0.9 : 1.0)) << c.label;
    if (c.bound > 0) {
      EXPECT_GE(m.min, -c.bound) << c.label;
      EXPECT_LT(m.max, c.bound) << c.label;
      EXPECT_LT(m.min, -c.bound * (1 - 1e-3)) << c.label;
      EXPECT_GT(m.max, c.bound * (1 - 1e-3)) << c.label;
    }
    // Neighbouring counters are uncorrelated.
    double corr = 0;
    for (std::size_t i = 0; i + 1 < v.size(); ++i) corr += (v[i] - m.mean) * (v[i + 1] - m.mean);
    corr /= (n - 1) * m.std * m.std;
    EXPECT_LT(std::abs(corr), 5 / std::sqrt(n)) << c.label;
  }
  const auto u = init_f64(shape, InitSpec::uniform(-3.0, 1.0), 11, "stats.uniform");
  const Moments mu = moments(u);
  EXPECT_NEAR(mu.mean, -1.0, 5 * (4 / std::sqrt(12.0)) / std::sqrt(n));
  EXPECT_NEAR(mu.std, 4 / std::sqrt(12.0), 5 * 0.9 * (4 / std::sqrt(12.0)) / std::sqrt(2 * n));
  EXPECT_GE(mu.min, -3.0);
  EXPECT_LT(mu.max, 1.0);
}

TEST(Initialize, TruncNormalStaysInBoundsWithTheTruncatedMoments) {
  const Shape shape{256, 256};
  const double n = static_cast<double>(shape_numel(shape));
  struct Case {
    InitSpec spec;
    double mean, std;  // of the truncated distribution (mpmath, 17 digits)
  };
  const Case cases[] = {
      {InitSpec::trunc_normal(), 0.0, 0.87962566103423975},                     // nn.init's default [-2, 2]
      {InitSpec::trunc_normal(0, 1, 5, 6), 5.1831470904771735, 0.17161710511625307},  // far upper tail
      {InitSpec::trunc_normal(0, 1, -6, -5), -5.1831470904771735, 0.17161710511625307},
      {InitSpec::trunc_normal(0, 1, 0.5, 0.7), 0.59800314340662249, 0.057675831146023113},
      {InitSpec::trunc_normal(1, 2, -1, 7), 1 + 2 * 0.28278611072715401, 2 * 0.784946963404426},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::f64, DType::f32}) {
      Tensor t = Tensor::empty(shape, dtype);
      initialize(t, shape, {0, 0}, c.spec, 5, "trunc");
      std::vector<double> v;
      if (dtype == DType::f64) {
        v = t.to_vector<double>();
      } else {
        for (float x : t.to_vector<float>()) v.push_back(x);
      }
      const Moments m = moments(v);
      EXPECT_GE(m.min, c.spec.low) << dtype_name(dtype);
      EXPECT_LE(m.max, c.spec.high) << dtype_name(dtype);
      EXPECT_NEAR(m.mean, c.mean, 5 * c.std / std::sqrt(n)) << "low " << c.spec.low;
      // Truncated tails can be heavier-shouldered than a normal: a wider std tolerance.
      EXPECT_NEAR(m.std, c.std, 8 * c.std / std::sqrt(n)) << "low " << c.spec.low;
    }
  }
  // A point mass when std is 0, clamped into the bounds.
  const auto point = init_f64({3}, InitSpec::trunc_normal(5.0, 0.0, -2, 2), 5, "trunc.point");
  for (double x : point) EXPECT_EQ(x, 2.0);
}

TEST(Initialize, Bf16AndF32AreTheRoundedF64Values) {
  const Shape shape{33, 17};
  for (const auto& [label, spec] : random_specs()) {
    const auto ref = init_f64(shape, spec, 99, "emb.weight");
    Tensor b = Tensor::empty({11, 17}, DType::bf16);
    initialize(b, shape, {20, 0}, spec, 99, "emb.weight");
    Tensor f = Tensor::empty({11, 17}, DType::f32);
    initialize(f, shape, {20, 0}, spec, 99, "emb.weight");
    const auto bv = b.to_vector<bfloat16>();
    const auto fv = f.to_vector<float>();
    for (std::size_t i = 0; i < bv.size(); ++i) {
      const double want = ref[20 * 17 + i];
      EXPECT_EQ(bv[i].bits, bfloat16(static_cast<float>(want)).bits) << label << " element " << i;
      EXPECT_EQ(fv[i], static_cast<float>(want)) << label << " element " << i;
    }
  }
}

TEST(Initialize, ZeroElementBlocksAreNoOps) {
  Tensor empty = Tensor::empty({0, 4}, DType::f32);
  EXPECT_NO_THROW(initialize(empty, {3, 4}, {3, 0}, InitSpec::xavier_normal(), 1, "w"));
  Tensor none = Tensor::empty({0, 4}, DType::f32);
  EXPECT_NO_THROW(initialize(none, {0, 4}, {0, 0}, InitSpec::kaiming_uniform(), 1, "w"));
}

TEST(Initialize, BadInputsNameTheParameter) {
  Tensor t = Tensor::empty({2, 3}, DType::f32);
  expect_error<ShapeError>([&] { initialize(t, {4, 3}, {3, 0}, InitSpec::normal(0, 1), 1, "blocks.2.proj"); },
                                  {"blocks.2.proj", "[4, 3]", "[3, 0]"});
  expect_error<ShapeError>([&] { initialize(t, {4, 3}, {0}, InitSpec::normal(0, 1), 1, "blocks.2.proj"); },
                                  {"blocks.2.proj"});
  expect_error<ShapeError>([&] { initialize(t, {2, 3, 1}, {0, 0, 0}, InitSpec::ones(), 1, "blocks.2.proj"); },
                                  {"blocks.2.proj"});
  Tensor bias = Tensor::empty({5}, DType::f32);
  expect_error<InvalidArgument>([&] { initialize(bias, {5}, {0}, InitSpec::xavier_uniform(), 1, "head.bias"); },
                                       {"head.bias", "xavier_uniform", "[5]"});
  expect_error<InvalidArgument>([&] { initialize(t, {2, 3}, {0, 0}, InitSpec::normal(0, -1), 1, "w.neg"); },
                                       {"w.neg", "std", "-1"});
  expect_error<InvalidArgument>([&] { initialize(t, {2, 3}, {0, 0}, InitSpec::uniform(2, 1), 1, "w.range"); },
                                       {"w.range", "low", "high"});
  expect_error<InvalidArgument>(
      [&] { initialize(t, {2, 3}, {0, 0}, InitSpec::trunc_normal(0, 1, 3, -3), 1, "w.trunc"); }, {"w.trunc", "low"});
  expect_error<InvalidArgument>(
      [&] { initialize(t, {2, 3}, {0, 0}, InitSpec::normal(std::nan(""), 1), 1, "w.nan"); }, {"w.nan", "mean"});
  Tensor ids = Tensor::empty({2, 3}, DType::i64);
  expect_error<ShapeError>([&] { initialize(ids, {2, 3}, {0, 0}, InitSpec::zeros(), 1, "tok.ids"); },
                                  {"tok.ids", "i64"});
  Tensor undefined;
  expect_error<InvalidArgument>([&] { initialize(undefined, {2}, {0}, InitSpec::zeros(), 1, "ghost"); },
                                       {"ghost"});
}

// -------------------------------------------------------------- nn::initialize_parameters

namespace {
// Two parameters: a row block [rows r0, r0+3) of a [7, 4] master weight and a whole bias.
class BlockModule : public nn::Module {
 public:
  explicit BlockModule(std::int64_t r0)
      : weight(Tensor::empty({3, 4}, DType::f32), {7, 4}, MeshPlacement{{}, Placement::shard(0), {}}, {r0, 0},
               InitSpec::xavier_normal()),
        bias(Tensor::empty({4}, DType::f64), InitSpec::uniform(-1, 1)) {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& dy) override { return dy; }
  std::string type_name() const override { return "BlockModule"; }
  Parameter weight, bias;
};
}  // namespace

TEST(InitializeParameters, FillsEachParameterByItsFqnAndOffset) {
  for (std::int64_t r0 : {0, 2, 4}) {
    BlockModule m(r0);
    nn::initialize_parameters(m, 2024, "encoder.proj");
    Tensor whole = Tensor::empty({7, 4}, DType::f32);
    initialize(whole, {7, 4}, {0, 0}, InitSpec::xavier_normal(), 2024, "encoder.proj.weight");
    const auto w = whole.to_vector<float>();
    const auto got = m.weight.value.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], w[static_cast<std::size_t>(r0 * 4) + i]);
    Tensor bias = Tensor::empty({4}, DType::f64);
    initialize(bias, {4}, {0}, InitSpec::uniform(-1, 1), 2024, "encoder.proj.bias");
    EXPECT_EQ(m.bias.value.to_vector<double>(), bias.to_vector<double>());
  }
  // Without a prefix the names are the bare parameter names.
  BlockModule bare(0);
  nn::initialize_parameters(bare, 1);
  Tensor bias = Tensor::empty({4}, DType::f64);
  initialize(bias, {4}, {0}, InitSpec::uniform(-1, 1), 1, "bias");
  EXPECT_EQ(bare.bias.value.to_vector<double>(), bias.to_vector<double>());
}
