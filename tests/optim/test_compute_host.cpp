// The host compute entries behind the optimizers and gradient clipping
// (src/backend/compute.hpp), called directly through detail::compute_for and checked
// against values worked out by hand: the casts' bf16 rounding at its edges, sums of
// squares and the clip's scale in bf16, and the SGD / AdamW element updates in the
// option combinations the Sgd and AdamW suites do not isolate. tests/unit's
// test_host_compute covers the first-step basics of the same entries;
// tests/cuda/test_cuda_optim compares every entry here with its CUDA twin.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/compute.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;

detail::Compute& host() { return detail::compute_for(Device::host()); }

std::uint16_t bits_of(bfloat16 b) { return b.bits; }

template <class To, class From>
std::vector<To> cast(DType from, const std::vector<From>& in, DType to) {
  std::vector<To> out(in.size());
  host().cast(from, in.data(), to, out.data(), static_cast<std::int64_t>(in.size()), 0);
  return out;
}

TEST(ComputeHostCast, F64ToBf16RoundsThroughF32AsTheBfloat16TypeDoes) {
  // 1 + 2^-8 + 2^-40 lies just above the tie between the bf16 neighbours 1 and 1 + 2^-7;
  // a direct rounding would go up, but f64 -> f32 first lands exactly on the tie
  // (2^-40 is below half an f32 ulp), which goes to the even neighbour, 1.
  const std::vector<double> in = {1.0 + 0x1p-8 + 0x1p-40, -(1.0 + 0x1p-8), 1.0 + 0x1p-8 + 0x1p-20, 0.1};
  const auto out = cast<bfloat16>(DType::f64, in, DType::bf16);
  EXPECT_EQ(static_cast<float>(out[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(out[1]), -1.0f);           // ties to even, sign kept
  EXPECT_EQ(static_cast<float>(out[2]), 1.0f + 0x1p-7f);  // above the tie in f32 too: up
  EXPECT_EQ(bits_of(out[3]), bfloat16(0.1f).bits);
}

TEST(ComputeHostCast, Bf16KeepsInfinitiesAndNaNAndOverflowsTheLargestFloatToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in = {inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::max(), -0.0f};
  const auto out = cast<bfloat16>(DType::f32, in, DType::bf16);
  EXPECT_EQ(static_cast<float>(out[0]), inf);
  EXPECT_EQ(static_cast<float>(out[1]), -inf);
  EXPECT_TRUE(std::isnan(static_cast<float>(out[2])));
  EXPECT_EQ(static_cast<float>(out[3]), inf);  // FLT_MAX is above the largest bf16 + half an ulp
  EXPECT_EQ(bits_of(out[4]), 0x8000u);         // -0 stays -0
}

TEST(ComputeHostCast, WideningIsExactAndSameDtypeIsABitCopy) {
  const std::vector<bfloat16> b = {bfloat16::from_bits(0x3f81), bfloat16::from_bits(0x0001),
                                   bfloat16::from_bits(0xc2f7)};
  const auto f = cast<float>(DType::bf16, b, DType::f32);
  const auto d = cast<double>(DType::bf16, b, DType::f64);
  for (std::size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(f[i], bfloat16::to_float(b[i].bits));
    EXPECT_EQ(d[i], static_cast<double>(f[i]));
  }
  EXPECT_EQ(f[0], 1.0f + 0x1p-7f);
  EXPECT_EQ(f[1], 0x1p-133f);  // the smallest bf16 subnormal
  const auto same = cast<bfloat16>(DType::bf16, b, DType::bf16);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(same[i].bits, b[i].bits);
  // f32 -> f64 -> f32 is the identity.
  const std::vector<float> x = {0.1f, -3.25f, 0x1p-149f};
  EXPECT_EQ(cast<float>(DType::f64, cast<double>(DType::f32, x, DType::f64), DType::f32), x);
}

TEST(ComputeHostSumSquares, WidensEachElementBeforeSquaringAndPropagatesInfinity) {
  const std::vector<float> f = {0.1f, -3.0f};
  const double tenth = static_cast<double>(0.1f);
  EXPECT_EQ(host().sum_squares(DType::f32, f.data(), 2, 0), tenth * tenth + 9.0);
  EXPECT_NE(host().sum_squares(DType::f32, f.data(), 1, 0), 0.01);  // f32's 0.1, not 0.1
  const std::vector<bfloat16> b = {bfloat16(3.0f), bfloat16(-4.0f), bfloat16(0.0f)};
  EXPECT_EQ(host().sum_squares(DType::bf16, b.data(), 3, 0), 25.0);
  EXPECT_EQ(host().sum_squares(DType::bf16, b.data(), 0, 0), 0.0);
  const std::vector<bfloat16> with_inf = {bfloat16(1.0f), bfloat16::from_bits(0xff80)};  // -inf
  EXPECT_EQ(host().sum_squares(DType::bf16, with_inf.data(), 2, 0), std::numeric_limits<double>::infinity());
}

TEST(ComputeHostScale, Bf16RoundsTheProductToF32AndThenToBf16) {
  // y = bf16(float(float(y) * alpha)): 1 * (1 + 2^-8 + 2^-30) is 1 + 2^-8 in f32, the
  // tie between bf16 1 and 1 + 2^-7, so the result is 1 (a direct rounding would go up).
  std::vector<bfloat16> y = {bfloat16(1.0f), bfloat16(1.0f), bfloat16(-6.0f), bfloat16(3.0f)};
  host().scale(DType::bf16, 1, 1.0 + 0x1p-8 + 0x1p-30, y.data(), 0);
  EXPECT_EQ(static_cast<float>(y[0]), 1.0f);
  // With 2^-20 instead the f32 product is above the tie: up. The bf16 ulp at 6 is 2^-5
  // and at 3 it is 2^-6, so -6 (1 + 2^-8 + ...) and 3 (1 + 2^-8 + ...) round away by one ulp.
  host().scale(DType::bf16, 3, 1.0 + 0x1p-8 + 0x1p-20, y.data() + 1, 0);
  EXPECT_EQ(static_cast<float>(y[1]), 1.0f + 0x1p-7f);
  EXPECT_EQ(static_cast<float>(y[2]), -6.0f - 0x1p-5f);
  EXPECT_EQ(static_cast<float>(y[3]), 3.0f + 0x1p-6f);
  host().scale(DType::bf16, 2, 0.25, y.data() + 2, 0);  // exact
  EXPECT_EQ(static_cast<float>(y[2]), (-6.0f - 0x1p-5f) / 4);
  EXPECT_EQ(static_cast<float>(y[3]), (3.0f + 0x1p-6f) / 4);
}

detail::SgdStep sgd_step(double lr, double weight_decay, double momentum, double dampening, bool nesterov,
                         bool first) {
  detail::SgdStep s;
  s.lr = lr;
  s.weight_decay = weight_decay;
  s.momentum = momentum;
  s.dampening = dampening;
  s.nesterov = nesterov;
  s.first = first;
  return s;
}

TEST(ComputeHostSgd, WithoutMomentumTheBufferIsNullAndTheStepIsPlainGradientDescent) {
  std::vector<double> w = {1.0, -2.0}, g = {0.5, 0.0};
  const auto s = sgd_step(0.1, 0.1, 0.0, 0.0, false, true);
  host().sgd_update(DType::f64, 2, w.data(), g.data(), nullptr, s, 0);
  EXPECT_DOUBLE_EQ(w[0], 1.0 - 0.1 * (0.5 + 0.1));  // 0.94
  EXPECT_DOUBLE_EQ(w[1], -2.0 - 0.1 * (0.1 * -2.0));  // decay alone: -1.98
  host().sgd_update(DType::f64, 2, w.data(), g.data(), nullptr, sgd_step(0.1, 0.1, 0.0, 0.0, false, false), 0);
  EXPECT_DOUBLE_EQ(w[0], 0.94 - 0.1 * (0.5 + 0.094));
}

TEST(ComputeHostSgd, DampeningScalesOnlyTheNewDirectionAfterTheFirstStep) {
  // momentum 0.5, dampening 0.5: the first step copies the direction into the buffer
  // (no dampening), later steps blend mu * buf + (1 - dampening) * d.
  std::vector<float> w = {1.0f}, g = {1.0f}, buf = {123.0f};  // stale buffer content is ignored
  host().sgd_update(DType::f32, 1, w.data(), g.data(), buf.data(), sgd_step(0.1, 0, 0.5, 0.5, false, true), 0);
  EXPECT_EQ(buf[0], 1.0f);
  EXPECT_EQ(w[0], 0.9f);
  g[0] = 3.0f;
  host().sgd_update(DType::f32, 1, w.data(), g.data(), buf.data(), sgd_step(0.1, 0, 0.5, 0.5, false, false), 0);
  EXPECT_EQ(buf[0], 2.0f);  // 0.5 * 1 + 0.5 * 3
  EXPECT_EQ(w[0], static_cast<float>(static_cast<double>(0.9f) - 0.1 * 2.0));
}

TEST(ComputeHostSgd, F32ElementsAreUpdatedInDoubleAndRoundedOnce) {
  // Nesterov, first step: d = g, buf = d, step along d + mu * buf = 1.9 g.
  std::vector<float> w = {2.0f, 1.0f}, g = {1.0f, 0x1p-30f}, buf = {0.0f, 0.0f};
  host().sgd_update(DType::f32, 2, w.data(), g.data(), buf.data(), sgd_step(0.5, 0, 0.9, 0, true, true), 0);
  EXPECT_EQ(w[0], 1.05f);  // 2 - 0.5 * 1.9
  EXPECT_EQ(buf[1], 0x1p-30f);
  EXPECT_EQ(w[1], 1.0f);  // 1 - 0.95 * 2^-30 rounds back to 1 in f32
}

detail::AdamWStep adamw_step(double lr, double beta1, double beta2, double eps, double weight_decay, int t) {
  detail::AdamWStep s;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.decay = 1.0 - lr * weight_decay;
  s.step_size = lr / (1.0 - std::pow(beta1, t));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
  return s;
}

TEST(ComputeHostAdamW, AConstantGradientMovesEachStepByLrAfterBiasCorrectionAndDecay) {
  // Bias-corrected moments of a constant gradient g are exactly g and g^2, so every step
  // moves w by lr * sign(g) (up to eps) after the decoupled decay w *= 1 - lr * wd; a zero
  // gradient leaves only the decay.
  std::vector<double> w = {1.0, 2.0}, g = {2.0, 0.0}, m = {0.0, 0.0}, v = {0.0, 0.0};
  const double lr = 0.1, wd = 0.5, eps = 1e-8;
  host().adamw_update(DType::f64, 2, w.data(), g.data(), m.data(), v.data(), adamw_step(lr, 0.9, 0.99, eps, wd, 1),
                      0);
  EXPECT_NEAR(m[0], 0.2, 1e-15);
  EXPECT_NEAR(v[0], 0.04, 1e-15);
  EXPECT_NEAR(w[0], 0.95 - 0.1, 1e-9);
  EXPECT_DOUBLE_EQ(w[1], 2.0 * 0.95);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(v[1], 0.0);
  host().adamw_update(DType::f64, 2, w.data(), g.data(), m.data(), v.data(), adamw_step(lr, 0.9, 0.99, eps, wd, 2),
                      0);
  EXPECT_NEAR(m[0], 0.9 * 0.2 + 0.1 * 2.0, 1e-15);    // 0.38
  EXPECT_NEAR(v[0], 0.99 * 0.04 + 0.01 * 4.0, 1e-15);  // 0.0796
  EXPECT_NEAR(w[0], 0.85 * 0.95 - 0.1, 1e-9);
  EXPECT_DOUBLE_EQ(w[1], 2.0 * 0.95 * 0.95);
}

TEST(ComputeHostAdamW, F32StateIsStoredInF32AfterTheDoubleUpdate) {
  std::vector<float> w = {1.0f}, g = {0.1f}, m = {0.0f}, v = {0.0f};
  const auto s = adamw_step(1e-3, 0.9, 0.999, 1e-8, 0.01, 1);
  host().adamw_update(DType::f32, 1, w.data(), g.data(), m.data(), v.data(), s, 0);
  const double gd = static_cast<double>(0.1f);
  const double mi = (1.0 - 0.9) * gd, vi = (1.0 - 0.999) * gd * gd;
  EXPECT_EQ(m[0], static_cast<float>(mi));
  EXPECT_EQ(v[0], static_cast<float>(vi));
  // First step: the update is lr * m_hat / sqrt(v_hat) = lr * g / |g| (up to eps).
  EXPECT_NEAR(w[0], (1.0 - 1e-3 * 0.01) - 1e-3, 1e-7);
}

}  // namespace
