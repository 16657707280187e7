// The host implementation of the compute interface (src/backend/compute.hpp), entry by
// entry, against values worked out by hand: the entries the layer suites do not reach
// directly (casts, bf16 scaling and sums of squares, the optimizer updates, the field
// loss and normalisation, halo zeroing), and the dispatch rule itself. Every one of these
// has a CUDA twin (tests/cuda/test_cuda_optim.cpp, test_cuda_training.cpp) that compares
// the two backends.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/compute.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;
using tessera::detail::compute_for;

detail::Compute& host() { return compute_for(Device::host()); }

TEST(HostCompute, DispatchPicksTheTensorsBackendAndAcceptsEveryHostTensor) {
  Tensor t = Tensor::zeros({3}, DType::f32);
  EXPECT_EQ(&compute_for(t, "test"), &host());
  EXPECT_TRUE(host().is_device_memory(t.data(), 0));
}

TEST(HostCompute, CastsRoundToNearestEvenIntoBf16AndWidenExactly) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  const std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 0.0f};
  std::vector<bfloat16> out(in.size());
  host().cast(DType::f32, in.data(), DType::bf16, out.data(), static_cast<std::int64_t>(in.size()), 0);
  EXPECT_EQ(static_cast<float>(out[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(out[1]), 1.0f + 0x1p-6f);
  EXPECT_EQ(static_cast<float>(out[2]), -2.5f);
  EXPECT_EQ(static_cast<float>(out[3]), 0.0f);
  std::vector<double> wide(in.size());
  host().cast(DType::bf16, out.data(), DType::f64, wide.data(), static_cast<std::int64_t>(in.size()), 0);
  EXPECT_EQ(wide[1], 1.0 + 0x1p-6);
  std::vector<float> narrow(2);
  const std::vector<double> d = {0.1, -1e-300};
  host().cast(DType::f64, d.data(), DType::f32, narrow.data(), 2, 0);
  EXPECT_EQ(narrow[0], 0.1f);
  EXPECT_EQ(narrow[1], -0.0f);
}

TEST(HostCompute, SumOfSquaresWidensBf16AndScaleRoundsBack) {
  std::vector<bfloat16> x = {bfloat16(1.5f), bfloat16(-2.0f), bfloat16(0.25f)};
  EXPECT_EQ(host().sum_squares(DType::bf16, x.data(), 3, 0), 2.25 + 4.0 + 0.0625);
  host().scale(DType::bf16, 3, 0.5, x.data(), 0);
  EXPECT_EQ(static_cast<float>(x[0]), 0.75f);
  EXPECT_EQ(static_cast<float>(x[1]), -1.0f);
  const std::vector<double> y = {3.0, 4.0};
  EXPECT_EQ(host().sum_squares(DType::f64, y.data(), 2, 0), 25.0);
}

TEST(HostCompute, SgdUpdateFollowsTorchWithMomentumNesterovAndWeightDecay) {
  std::vector<double> w = {1.0, -2.0}, g = {0.5, 0.25}, buf = {0.0, 0.0};
  detail::SgdStep s;
  s.lr = 0.1;
  s.weight_decay = 0.01;
  s.momentum = 0.9;
  s.nesterov = true;
  s.first = true;
  host().sgd_update(DType::f64, 2, w.data(), g.data(), buf.data(), s, 0);
  // d = g + wd w; first step: buf = d; nesterov: d + mu buf.
  const double d0 = 0.5 + 0.01 * 1.0, d1 = 0.25 + 0.01 * -2.0;
  EXPECT_DOUBLE_EQ(buf[0], d0);
  EXPECT_DOUBLE_EQ(w[0], 1.0 - 0.1 * (d0 + 0.9 * d0));
  EXPECT_DOUBLE_EQ(w[1], -2.0 - 0.1 * (d1 + 0.9 * d1));
  s.first = false;
  const double w0 = w[0];
  host().sgd_update(DType::f64, 2, w.data(), g.data(), buf.data(), s, 0);
  const double e0 = 0.5 + 0.01 * w0, b0 = 0.9 * d0 + e0;
  EXPECT_DOUBLE_EQ(buf[0], b0);
  EXPECT_DOUBLE_EQ(w[0], w0 - 0.1 * (e0 + 0.9 * b0));
}

TEST(HostCompute, AdamWUpdateUsesTheHostPrecomputedBiasCorrections) {
  std::vector<float> w = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  detail::AdamWStep s;
  s.beta1 = 0.9;
  s.beta2 = 0.999;
  s.eps = 1e-8;
  s.decay = 1.0 - 0.01 * 0.1;
  s.step_size = 0.01 / (1.0 - 0.9);
  s.bias_correction2_sqrt = std::sqrt(1.0 - 0.999);
  host().adamw_update(DType::f32, 1, w.data(), g.data(), m.data(), v.data(), s, 0);
  const double mi = 0.1 * 0.5, vi = 0.001 * 0.25;
  EXPECT_EQ(m[0], static_cast<float>(mi));
  EXPECT_EQ(v[0], static_cast<float>(vi));
  EXPECT_EQ(w[0], static_cast<float>(1.0 * s.decay - s.step_size * mi / (std::sqrt(vi) / s.bias_correction2_sqrt + 1e-8)));
}

TEST(HostCompute, WeightedSquaredErrorWeighsEachRowAndWritesTheGradient) {
  // One plane of 2 rows x 2 cols.
  const std::vector<double> p = {1, 2, 3, 4}, t = {0, 0, 1, 1}, w = {2.0, 0.5};
  std::vector<double> grad(4);
  const double sum = host().weighted_squared_error(DType::f64, p.data(), t.data(), w.data(), 1, 2, 2, 0.5,
                                                   grad.data(), 0);
  EXPECT_DOUBLE_EQ(sum, 2.0 * (1 + 4) + 0.5 * (4 + 9));
  EXPECT_DOUBLE_EQ(grad[1], 0.5 * 2.0 * 2.0);
  EXPECT_DOUBLE_EQ(grad[3], 0.5 * 0.5 * 3.0);
}

TEST(HostCompute, ChannelAffineMapsEveryChannelOfEverySample) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};  // [2 samples, 2 channels, 2 inner]
  const std::vector<double> scale = {2.0, -1.0}, shift = {0.5, 10.0};
  host().channel_affine(DType::f32, x.data(), scale.data(), shift.data(), 2, 2, 2, 0);
  EXPECT_EQ(x, (std::vector<float>{2.5f, 4.5f, 7.0f, 6.0f, 10.5f, 12.5f, 3.0f, 2.0f}));
}

TEST(HostCompute, HaloZeroClearsOnlyTheRectangleOnEveryLeadingIndex) {
  std::vector<double> field(2 * 3 * 4, 1.0);  // [2, 3 lat, 4 lon]
  detail::StridedLayout layout;
  layout.ndim = 3;
  layout.shape[0] = 2;
  layout.shape[1] = 3;
  layout.shape[2] = 4;
  layout.strides[0] = 12;
  layout.strides[1] = 4;
  layout.strides[2] = 1;
  const detail::HaloRect rect{1, 1, 1, 2, 1};  // row 1, columns 1..2
  host().halo_zero(DType::f64, field.data(), layout, rect, 0);
  int zeros = 0;
  for (double v : field) zeros += v == 0.0;
  EXPECT_EQ(zeros, 4);
  EXPECT_EQ(field[4 + 1], 0.0);
  EXPECT_EQ(field[12 + 4 + 2], 0.0);
  EXPECT_EQ(field[12 + 4 + 3], 1.0);
}

}  // namespace
