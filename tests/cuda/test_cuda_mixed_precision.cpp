// The CUDA twin of tests/nn/test_mixed_precision.cpp: ops::cast to bf16 and ops::gemm in
// bf16-mixed precision (tessera/precision.hpp) on device tensors, and nn::Linear and
// nn::Conv2d in bf16-mixed on the device, against the host backend on the same inputs.
//
// Tolerances. Casts, and the GEMM's own rounding of f32 operands, round to nearest even
// on both backends: bit-identical. A bf16-mixed GEMM multiplies the same bf16
// operands exactly in fp32 on both backends; only the fp32 summation differs (cuBLAS's
// order, on tensor cores, against the host BLAS's). Each is within gamma_n S of the
// exact sum for an IEEE fp32 sum (S = the sum of the terms' magnitudes, n the number of
// terms, gamma_n = n u / (1 - n u), u = 2^-24); tensor cores' fp32 accumulation may
// truncate instead of rounding to nearest, doubling the unit, so the twins are held to
// 4 gamma_n S elementwise, S computed exactly (in f64) on the host from the rounded
// operands' magnitudes.
//
// Every test needs a GPU; without one each is skipped with the runtime's reason, so the
// executable exits 77 and CTest reports Skipped. One rank.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../support/bf16_reorder_bound.hpp"
#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"
#include "tessera/precision.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;
using tessera::testing::bf16_magnitude;
using tessera::testing::magnitude;
namespace F = tessera::nn::functional;

constexpr Precision kBf16 = Precision::bf16_mixed;

// |device - host| within the reorder bound with the unit doubled (see the header).
void expect_within_bound(const Tensor& device, const Tensor& host, const Tensor& mag, std::int64_t terms,
                         const std::string& what) {
  EXPECT_TRUE(tessera::testing::within_reorder_bound(device.to(Device::host()), host, mag, terms, 2.0)) << what;
}

class CudaMixedPrecision : public ::testing::Test {
 protected:
  void SetUp() override {
    const int count = cuda_device_count();
    if (count == 0) GTEST_SKIP() << cuda_unavailable_reason();
    device_ = Device::cuda(world_rank() % count);
  }
  Tensor dev(const Tensor& host) const { return host.to(device_); }
  Device device_;
};

TEST_F(CudaMixedPrecision, CastRoundsLikeTheHost) {
  // Every bf16 pattern's f32 value nudged to just below, at and just above the
  // midpoints of its neighbours: the ties and the cases around them.
  std::vector<float> values;
  for (std::uint32_t p = 0; p < 65536; p += 7) {
    const std::uint32_t bits = p << 16;
    for (std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x1234u}) {
      float f;
      const std::uint32_t u = bits | low;
      std::memcpy(&f, &u, sizeof f);
      values.push_back(f);
    }
  }
  const Tensor x = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  EXPECT_TRUE(bit_identical(ops::cast(dev(x), DType::bf16), ops::cast(x, DType::bf16)));
  const Tensor b = ops::cast(x, DType::bf16);
  EXPECT_TRUE(bit_identical(ops::cast(dev(b), DType::f32), ops::cast(b, DType::f32)));
}

// The device GEMM rounds its f32 operands itself: against 1.0 with a contraction of
// length 1, C is the rounded operand, bit for bit the host cast's (ties and neighbours).
TEST_F(CudaMixedPrecision, GemmRoundsOperandsLikeTheHostCast) {
  std::vector<float> values;
  for (std::uint32_t p = 0; p < 65536; p += 5) {
    if ((p & 0x7F80u) == 0x7F80u || (p & 0x7FFFu) == 0x7F7Fu) continue;  // Inf/NaN, or rounding up to Inf
    for (std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) {
      const std::uint32_t u = (p << 16) | low;
      float f;
      std::memcpy(&f, &u, sizeof f);
      values.push_back(f);
    }
  }
  const auto n = static_cast<std::int64_t>(values.size());
  const Tensor v = Tensor::from_vector(values, {n, 1});
  const Tensor one = Tensor::from_vector<float>({1.0f}, {1, 1});
  const Tensor want = ops::cast(ops::cast(v, DType::bf16), DType::f32);
  Tensor c = Tensor::zeros({n, 1}, DType::f32, device_);
  ops::gemm(dev(v), false, dev(one), false, c, 1.0, 0.0, kBf16);
  EXPECT_TRUE(bit_identical(c, want)) << "A side";
  Tensor r = Tensor::zeros({1, n}, DType::f32, device_);
  ops::gemm(dev(one), false, dev(v.reshape({1, n})), false, r, 1.0, 0.0, kBf16);
  EXPECT_TRUE(bit_identical(r, want.reshape({1, n}))) << "B side";
}

TEST_F(CudaMixedPrecision, GemmMatchesHostForEveryTranspose) {
  const std::int64_t m = 9, n = 7, k = 33;
  unsigned seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0}) {
        const std::string what = std::string("ta=") + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N") +
                                 " beta=" + std::to_string(beta);
        const Tensor a = random_host(ta ? Shape{k, m} : Shape{m, k}, DType::f32, seed++);
        const Tensor b = random_host(tb ? Shape{n, k} : Shape{k, n}, DType::f32, seed++);
        const Tensor c0 = random_host({m, n}, DType::f32, seed++);
        Tensor host = c0.clone(), device = dev(c0);
        ops::gemm(a, ta, b, tb, host, 1.0, beta, kBf16);
        ops::gemm(dev(a), ta, dev(b), tb, device, 1.0, beta, kBf16);
        Tensor mag = Tensor::zeros({m, n}, DType::f64);
        ops::gemm(bf16_magnitude(a), ta, bf16_magnitude(b), tb, mag);
        if (beta != 0) {
          ops::axpy(beta, magnitude(c0), mag);
        }
        expect_within_bound(device, host, mag, k + 1, what);
      }
}

TEST_F(CudaMixedPrecision, LinearAndConv2dMatchHost) {
  nn::Linear host_lin(16, 6), device_lin(16, 6, true, DType::f32, device_);
  host_lin.weight.value.copy_from(random_host({6, 16}, DType::f32, 21));
  host_lin.bias.value.copy_from(random_host({6}, DType::f32, 22));
  device_lin.weight.value.copy_from(dev(host_lin.weight.value));
  device_lin.bias.value.copy_from(dev(host_lin.bias.value));
  host_lin.set_compute_precision(kBf16);
  device_lin.set_compute_precision(kBf16);
  const Tensor x = random_host({3, 16}, DType::f32, 23), dy = random_host({3, 6}, DType::f32, 24);
  const Tensor y = host_lin.forward(x), dx = host_lin.backward(dy);
  const Tensor yd = device_lin.forward(dev(x)), dxd = device_lin.backward(dev(dy));
  const Tensor ax = bf16_magnitude(x), aw = bf16_magnitude(host_lin.weight.value), ady = bf16_magnitude(dy);
  Tensor gw_mag = Tensor::zeros(aw.shape(), DType::f64), no_bias;
  const Tensor dx_mag = F::linear_backward(ady, ax, aw, gw_mag, no_bias);
  expect_within_bound(yd, y, F::linear(ax, aw, magnitude(host_lin.bias.value)), 17, "linear y");
  expect_within_bound(dxd, dx, dx_mag, 6, "linear dx");
  expect_within_bound(device_lin.weight.grad, host_lin.weight.grad, gw_mag, 3, "linear dW");
  expect_close(device_lin.bias.grad, host_lin.bias.grad, 1e-6, "linear db");

  F::Conv2dOptions same;
  same.padding_h = same.padding_w = 1;
  nn::Conv2d host_conv(3, 4, 3, 3, same), device_conv(3, 4, 3, 3, same, true, DType::f32, device_);
  host_conv.weight.value.copy_from(random_host({4, 3, 3, 3}, DType::f32, 25));
  host_conv.bias.value.copy_from(random_host({4}, DType::f32, 26));
  device_conv.weight.value.copy_from(dev(host_conv.weight.value));
  device_conv.bias.value.copy_from(dev(host_conv.bias.value));
  host_conv.set_compute_precision(kBf16);
  device_conv.set_compute_precision(kBf16);
  const Tensor cx = random_host({2, 3, 5, 6}, DType::f32, 27), cdy = random_host({2, 4, 5, 6}, DType::f32, 28);
  const Tensor cy = host_conv.forward(cx), cdx = host_conv.backward(cdy);
  const Tensor cyd = device_conv.forward(dev(cx)), cdxd = device_conv.backward(dev(cdy));
  const Tensor cax = bf16_magnitude(cx), caw = bf16_magnitude(host_conv.weight.value);
  const Tensor cady = bf16_magnitude(cdy);
  Tensor cgw_mag = Tensor::zeros(caw.shape(), DType::f64);
  const Tensor cdx_mag = F::conv2d_backward(cady, cax, caw, cgw_mag, no_bias, same);
  expect_within_bound(cyd, cy, F::conv2d(cax, caw, magnitude(host_conv.bias.value), same), 3 * 9 + 1,
                      "conv y");
  expect_within_bound(cdxd, cdx, cdx_mag, 4 * 9, "conv dx");
  expect_within_bound(device_conv.weight.grad, host_conv.weight.grad, cgw_mag, 2 * 5 * 6, "conv dW");
  expect_close(device_conv.bias.grad, host_conv.bias.grad, 1e-6, "conv db");
}

}  // namespace
