// Mixed precision (Precision::bf16_mixed, tessera/precision.hpp) on the host: ops::cast's
// rounding, ops::gemm's bf16 GEMM against sgemm of operands rounded beforehand, and
// nn::Linear / nn::Conv2d forward and backward against the fp32 computation on rounded
// operands; set_compute_precision through an activation checkpoint and Module::replace.
//
// The host bf16 GEMM takes one of two paths (src/backend/host/host_blas.cpp): the BLAS's
// cblas_sbgemm, looked up with dlsym(RTLD_DEFAULT), or the operands widened to f32 and
// sgemm. This executable exports a cblas_sbgemm of its own (a reference triple loop that
// counts its calls; ENABLE_EXPORTS in tests/nn/CMakeLists.txt), so it is registered twice:
//   test_nn_mixed_precision.np1         the lookup finds it: bf16 GEMMs go through it;
//   test_nn_mixed_precision_sbgemm_off  TESSERA_HOST_SBGEMM=0: the conversion path.
// Every test runs in both and knows which path it is on. On the conversion path a bf16
// GEMM is the very sgemm call the fp32 path makes on rounded operands, so results must be
// bit-identical; through sbgemm only the order of the fp32 sums differs, so they must
// agree within the bound on reordered fp32 sums (gemm_tolerance below).

// The build's CBLAS header (tests/nn/CMakeLists.txt passes it as host_blas.cpp gets it).
#include TESSERA_CBLAS_HEADER
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../support/bf16_reorder_bound.hpp"
#include "nn_test_util.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/precision.hpp"

namespace {

// Calls of the exported cblas_sbgemm below.
std::int64_t sbgemm_calls = 0;

}  // namespace

// The BLAS's bf16 GEMM as OpenBLAS declares it (row- or column-major enum, transposes,
// 32-bit BLAS integers; bf16 operands as raw 16-bit patterns, f32 C), written as the
// reference: row-major only (the only order tessera passes), fp32 accumulation in index
// order. Its parameter types are those the library calls it through (host_blas.cpp's
// SbgemmFn, from the build's CBLAS header, included here the same way): a definition
// with plain ints would be called through a pointer of another function type, which
// UBSan's -fsanitize=function reports.
extern "C" void cblas_sbgemm(decltype(CblasRowMajor) order, decltype(CblasNoTrans) trans_a,
                             decltype(CblasNoTrans) trans_b, blasint m, blasint n, blasint k, float alpha,
                             const std::uint16_t* a, blasint lda, const std::uint16_t* b, blasint ldb, float beta,
                             float* c, blasint ldc) {
  if (order != CblasRowMajor) {
    std::fprintf(stderr, "test cblas_sbgemm: only row-major is implemented, got %d\n", static_cast<int>(order));
    std::abort();
  }
  ++sbgemm_calls;
  const auto at = [&](std::int64_t i, std::int64_t l) {
    return tessera::bfloat16::to_float(trans_a == CblasTrans ? a[l * lda + i] : a[i * lda + l]);
  };
  const auto bt = [&](std::int64_t l, std::int64_t j) {
    return tessera::bfloat16::to_float(trans_b == CblasTrans ? b[j * ldb + l] : b[l * ldb + j]);
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (std::int64_t l = 0; l < k; ++l) s += at(i, l) * bt(l, j);
      float& cij = c[i * ldc + j];
      cij = alpha * s + (beta == 0.0f ? 0.0f : beta * cij);
    }
}

using namespace tessera;
using namespace tessera::nn_test;
using tessera::testing::bf16_magnitude;
using tessera::testing::bf16_rounded;
using tessera::testing::magnitude;
using tessera::testing::max_relative_difference;
using tessera::testing::within_reorder_bound;
namespace F = tessera::nn::functional;

namespace {

// Whether bf16 GEMMs go through the exported cblas_sbgemm in this process (the second
// registration sets TESSERA_HOST_SBGEMM=0).
bool sbgemm_path() {
  const char* env = std::getenv("TESSERA_HOST_SBGEMM");
  return !(env && std::strcmp(env, "0") == 0);
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::uint16_t bf16_bits(float v) {
  const Tensor t = ops::cast(Tensor::from_vector<float>({v}, {1}), DType::bf16);
  return t.to_vector<tessera::bfloat16>()[0].bits;
}

Tensor f32_random(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  return random_tensor(shape, DType::f32, seed, scale);
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data(), cb.data(), ca.nbytes()) == 0;
}

// got and want (f32) are the same bf16 computation: bit-identical on the conversion
// path, within the fp32 reorder bound (tests/support/bf16_reorder_bound.hpp) through
// sbgemm. `mag` is S, `terms` bounds n.
void expect_same_bf16_result(const Tensor& got, const Tensor& want, const Tensor& mag, std::int64_t terms,
                             const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::f32) << what;
  if (!sbgemm_path()) {
    EXPECT_TRUE(bit_identical(got, want)) << what << ": the conversion path is sgemm on the rounded operands";
    return;
  }
  EXPECT_TRUE(within_reorder_bound(got, want, mag, terms)) << what;
}

// ---- ops::cast

TEST(MixedPrecisionCast, EveryBf16ValueRoundTripsExactly) {
  // All 65536 patterns: bf16 -> f32 is exact, f32 -> bf16 gives the pattern back
  // (NaNs stay NaN, quieted), and so does bf16 -> f64 -> bf16.
  std::vector<tessera::bfloat16> all(65536);
  for (std::uint32_t p = 0; p < 65536; ++p) all[p] = tessera::bfloat16::from_bits(static_cast<std::uint16_t>(p));
  const Tensor b = Tensor::from_vector(all, {65536});
  const Tensor f = ops::cast(b, DType::f32);
  const Tensor d = ops::cast(b, DType::f64);
  const auto fv = f.to_vector<float>();
  const auto dv = d.to_vector<double>();
  const auto back = ops::cast(f, DType::bf16).to_vector<tessera::bfloat16>();
  const auto back64 = ops::cast(d, DType::bf16).to_vector<tessera::bfloat16>();
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const float want = bits_to_float(p << 16);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(fv[p]) && std::isnan(dv[p])) << p;
      EXPECT_TRUE(std::isnan(tessera::bfloat16::to_float(back[p].bits))) << p;
      continue;
    }
    ASSERT_EQ(std::memcmp(&fv[p], &want, sizeof want), 0) << "pattern " << p;
    ASSERT_EQ(dv[p], static_cast<double>(want)) << "pattern " << p;
    ASSERT_EQ(back[p].bits, p) << "pattern " << p;
    ASSERT_EQ(back64[p].bits, p) << "pattern " << p;
  }
}

TEST(MixedPrecisionCast, RoundsToNearestEven) {
  // bf16 keeps 8 significant bits: between 1 and 2 its spacing is 2^-7.
  const float h = std::ldexp(1.0f, -8);  // half a bf16 ulp at 1
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(1.0f + h), 0x3F80);                         // tie, 1 is even
  EXPECT_EQ(bf16_bits(1.0f + 3 * h), 0x3F82);                     // tie, 1 + 2^-6 is even
  EXPECT_EQ(bf16_bits(1.0f + h + std::ldexp(1.0f, -20)), 0x3F81);  // above the tie
  EXPECT_EQ(bf16_bits(1.0f + h - std::ldexp(1.0f, -20)), 0x3F80);  // below the tie
  EXPECT_EQ(bf16_bits(-(1.0f + h)), 0xBF80);                      // symmetric in sign
  EXPECT_EQ(bf16_bits(-(1.0f + 3 * h)), 0xBF82);
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  // The largest float rounds past bf16's largest finite (0x7F7F) to infinity.
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16_bits(bits_to_float(0x7F7F7FFF)), 0x7F7F);  // just below the tie: stays finite
  // Subnormals round the same way (the low 16 bits decide).
  EXPECT_EQ(bf16_bits(bits_to_float(0x00018000)), 0x0002);  // tie, 2 is even
  EXPECT_EQ(bf16_bits(bits_to_float(0x00008000)), 0x0000);  // tie, 0 is even
  EXPECT_TRUE(std::isnan(tessera::bfloat16::to_float(bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits in the low bits only stays NaN (not infinity).
  EXPECT_TRUE(std::isnan(tessera::bfloat16::to_float(bf16_bits(bits_to_float(0x7F800001)))));

  // f64 sources (the same values, exact in f32) round alike.
  const Tensor d = Tensor::from_vector<double>({1.0 + h, 1.0 + 3 * h, -(1.0 + h)}, {3});
  const auto b = ops::cast(d, DType::bf16).to_vector<tessera::bfloat16>();
  EXPECT_EQ(b[0].bits, 0x3F80);
  EXPECT_EQ(b[1].bits, 0x3F82);
  EXPECT_EQ(b[2].bits, 0xBF80);
}

TEST(MixedPrecisionCast, CopiesShapesAndRejectsIntegers) {
  const Tensor x = f32_random({3, 4}, 1);
  const Tensor y = ops::cast(x, DType::f32);
  EXPECT_TRUE(bit_identical(x, y));
  EXPECT_NE(x.data(), y.data());  // a copy, not a view
  // A non-contiguous source (two of four columns): its values in logical order.
  const Tensor t = x.narrow(1, 1, 2);
  ASSERT_FALSE(t.is_contiguous());
  const Tensor tb = ops::cast(t, DType::bf16);
  EXPECT_EQ(tb.shape(), (Shape{3, 2}));
  EXPECT_TRUE(bit_identical(ops::cast(tb, DType::f32), bf16_rounded(t.contiguous())));
  expect_error<ShapeError>([] { (void)ops::cast(Tensor::zeros({2}, DType::i64), DType::bf16); }, {"ops::cast", "i64"});
  expect_error<ShapeError>([&] { (void)ops::cast(x, DType::i64); }, {"ops::cast", "i64"});
}

// ---- ops::gemm

TEST(MixedPrecisionGemm, EqualsSgemmOfRoundedOperands) {
  const std::int64_t m = 7, n = 5, k = 19;
  const std::int64_t calls_before = sbgemm_calls;
  int cases = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0}) {
        const std::string what = std::string("ta=") + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N") +
                                 " beta=" + std::to_string(beta);
        const Tensor a = f32_random(ta ? Shape{k, m} : Shape{m, k}, 10 + cases);
        const Tensor b = f32_random(tb ? Shape{n, k} : Shape{k, n}, 20 + cases);
        const Tensor c0 = f32_random({m, n}, 30 + cases);
        Tensor c = c0.clone(), want = c0.clone();
        ops::gemm(a, ta, b, tb, c, 1.0, beta, Precision::bf16_mixed);
        ops::gemm(bf16_rounded(a), ta, bf16_rounded(b), tb, want, 1.0, beta, Precision::fp32);
        // S = |op(A_r)| |op(B_r)| + beta |C|, exact in f64.
        Tensor mag = Tensor::zeros({m, n}, DType::f64);
        ops::gemm(bf16_magnitude(a), ta, bf16_magnitude(b), tb, mag);
        if (beta != 0) ops::axpy(beta, magnitude(c0), mag);
        expect_same_bf16_result(c, want, mag, k + 1, what);
        // Not the fp32 product: the rounding of the operands shows.
        Tensor plain = c0.clone();
        ops::gemm(a, ta, b, tb, plain, 1.0, beta);
        EXPECT_GT(max_relative_difference(c, plain), 1e-4) << what;
        // bf16 operands as given are read as they are.
        Tensor from_bf16 = c0.clone();
        ops::gemm(ops::cast(a, DType::bf16), ta, ops::cast(b, DType::bf16), tb, from_bf16, 1.0, beta,
                  Precision::bf16_mixed);
        EXPECT_TRUE(bit_identical(from_bf16, c)) << what;
        ++cases;
      }
  EXPECT_EQ(cases, 8);
  // Two bf16 GEMMs per case, through sbgemm unless it is turned off.
  EXPECT_EQ(sbgemm_calls - calls_before, sbgemm_path() ? 2 * cases : 0);
}

// The GEMM rounds its f32 operands itself (not through ops::cast): with a contraction of
// length 1 against 1.0, C is the rounded operand exactly, on either path and either side.
// Every 5th bf16 pattern's f32 neighbourhood: ties (low half 0x8000), just below and above.
TEST(MixedPrecisionGemm, RoundsOperandsToNearestEven) {
  std::vector<float> values;
  for (std::uint32_t p = 0; p < 65536; p += 5) {
    if ((p & 0x7F80u) == 0x7F80u || (p & 0x7FFFu) == 0x7F7Fu) continue;  // Inf/NaN, or rounding up to Inf
    for (std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x0001u, 0xFFFFu}) {
      if (low == 0xFFFFu && (p & 0x7FFFu) == 0x7F7Eu) continue;
      values.push_back(bits_to_float((p << 16) | low));
    }
  }
  const auto n = static_cast<std::int64_t>(values.size());
  const Tensor v = Tensor::from_vector(values, {n, 1});
  const Tensor one = Tensor::from_vector<float>({1.0f}, {1, 1});
  const Tensor want = ops::cast(ops::cast(v, DType::bf16), DType::f32);
  for (bool ta : {false, true}) {
    Tensor c = Tensor::zeros({n, 1}, DType::f32);
    ops::gemm(ta ? v.reshape({1, n}) : v, ta, one, false, c, 1.0, 0.0, Precision::bf16_mixed);  // A side
    EXPECT_TRUE(bit_identical(c, want)) << "A side, ta=" << ta;
    Tensor r = Tensor::zeros({1, n}, DType::f32);
    ops::gemm(one, false, ta ? v : v.reshape({1, n}), ta, r, 1.0, 0.0, Precision::bf16_mixed);  // B side
    EXPECT_TRUE(bit_identical(r, want.reshape({1, n}))) << "B side, tb=" << ta;
  }
}

TEST(MixedPrecisionGemm, AlphaScalesTheBf16Product) {
  const Tensor a = f32_random({4, 6}, 41), b = f32_random({6, 3}, 42);
  Tensor c = Tensor::zeros({4, 3}, DType::f32), want = Tensor::zeros({4, 3}, DType::f32);
  ops::gemm(a, false, b, false, c, 0.5, 0.0, Precision::bf16_mixed);
  ops::gemm(bf16_rounded(a), false, bf16_rounded(b), false, want, 0.5, 0.0);
  Tensor mag = Tensor::zeros({4, 3}, DType::f64);
  ops::gemm(bf16_magnitude(a), false, bf16_magnitude(b), false, mag, 0.5);
  expect_same_bf16_result(c, want, mag, 6, "alpha 0.5");
}

TEST(MixedPrecisionGemm, RejectsF64AndBf16Results) {
  const Tensor a = f32_random({2, 3}, 51), b = f32_random({3, 2}, 52);
  Tensor c = Tensor::zeros({2, 2}, DType::f32);
  const Tensor a64 = ops::cast(a, DType::f64), b64 = ops::cast(b, DType::f64);
  Tensor c64 = Tensor::zeros({2, 2}, DType::f64), c16 = Tensor::zeros({2, 2}, DType::bf16);
  const std::int64_t calls_before = sbgemm_calls;
  expect_error<ShapeError>([&] { ops::gemm(a64, false, b, false, c, 1.0, 0.0, Precision::bf16_mixed); },
                           {"gemm", "bf16-mixed", "f64"});
  expect_error<ShapeError>([&] { ops::gemm(a, false, b64, false, c, 1.0, 0.0, Precision::bf16_mixed); },
                           {"gemm", "bf16-mixed", "f64"});
  expect_error<ShapeError>([&] { ops::gemm(a, false, b, false, c64, 1.0, 0.0, Precision::bf16_mixed); },
                           {"gemm", "bf16-mixed", "f64"});
  expect_error<ShapeError>([&] { ops::gemm(a, false, b, false, c16, 1.0, 0.0, Precision::bf16_mixed); },
                           {"gemm", "C"});
  EXPECT_EQ(sbgemm_calls, calls_before);  // rejected before any GEMM
}

TEST(MixedPrecisionGemm, SbgemmLookupFollowsTheEnvironment) {
  // One bf16 GEMM: through the exported sbgemm unless TESSERA_HOST_SBGEMM=0.
  const Tensor a = f32_random({3, 4}, 61), b = f32_random({4, 2}, 62);
  Tensor c = Tensor::zeros({3, 2}, DType::f32);
  const std::int64_t before = sbgemm_calls;
  ops::gemm(a, false, b, false, c, 1.0, 0.0, Precision::bf16_mixed);
  if (sbgemm_path()) {
    EXPECT_EQ(sbgemm_calls - before, 1) << "the exported cblas_sbgemm was not found by dlsym(RTLD_DEFAULT)";
  } else {
    EXPECT_EQ(sbgemm_calls, 0) << "TESSERA_HOST_SBGEMM=0 must turn the lookup off";
  }
  // An fp32 GEMM never reaches sbgemm.
  const std::int64_t after = sbgemm_calls;
  ops::gemm(a, false, b, false, c);
  EXPECT_EQ(sbgemm_calls, after);
}

// ---- Layers

// Linear [rows, in] -> [rows, out] in bf16-mixed against functional::linear in fp32 on
// the rounded x, W (and dy for dx and dW; the bias gradient sums dy unrounded).
TEST(MixedPrecisionLayers, LinearEqualsFp32OnRoundedOperands) {
  for (bool with_bias : {true, false}) {
    const std::string what = with_bias ? "with bias" : "without bias";
    nn::Linear lin(12, 5, with_bias);
    fill_parameters(lin, 71);
    lin.set_compute_precision(Precision::bf16_mixed);
    EXPECT_EQ(lin.compute_precision(), Precision::bf16_mixed);
    const Tensor x = f32_random({2, 3, 12}, 72), dy = f32_random({2, 3, 5}, 73);
    lin.zero_grad();
    const Tensor y = lin.forward(x);
    const Tensor dx = lin.backward(dy);
    EXPECT_EQ(dx.dtype(), DType::f32);
    EXPECT_EQ(lin.weight.grad.dtype(), DType::f32);

    const Tensor xr = bf16_rounded(x), wr = bf16_rounded(lin.weight.value), dyr = bf16_rounded(dy);
    const Tensor b = with_bias ? lin.bias.value : Tensor();
    const Tensor y_ref = F::linear(xr, wr, b);
    Tensor gw_ref = Tensor::zeros(lin.weight.value.shape(), DType::f32), no_bias;
    const Tensor dx_ref = F::linear_backward(dyr, xr, wr, gw_ref, no_bias);
    // Magnitudes: |x||W|^T + |b|, |dy||W|, |dy|^T|x|, in f64.
    const Tensor ax = magnitude(xr), aw = magnitude(wr), ady = magnitude(dyr);
    const Tensor y_mag = F::linear(ax, aw, with_bias ? magnitude(b) : Tensor());
    Tensor gw_mag = Tensor::zeros(aw.shape(), DType::f64), unused;
    const Tensor dx_mag = F::linear_backward(ady, ax, aw, gw_mag, unused);
    expect_same_bf16_result(y, y_ref, y_mag, 12 + 1, "Linear y " + what);
    expect_same_bf16_result(dx, dx_ref, dx_mag, 5, "Linear dx " + what);
    expect_same_bf16_result(lin.weight.grad, gw_ref, gw_mag, 6, "Linear dW " + what);
    if (with_bias) {
      // The bias gradient is a plain f32 reduction of the unrounded dy.
      Tensor gb_ref = Tensor::zeros({5}, DType::f32), no_weight;
      (void)F::linear_backward(dy, xr, wr, no_weight, gb_ref);
      EXPECT_TRUE(bit_identical(lin.bias.grad, gb_ref)) << what;
    }

    // The plain fp32 layer differs by the operands' rounding.
    const Tensor y_fp32 = F::linear(x, lin.weight.value, b);
    Tensor gw_fp32 = Tensor::zeros(lin.weight.value.shape(), DType::f32);
    const Tensor dx_fp32 = F::linear_backward(dy, x, lin.weight.value, gw_fp32, no_bias);
    EXPECT_GT(max_relative_difference(y, y_fp32), 1e-4) << what;
    EXPECT_GT(max_relative_difference(dx, dx_fp32), 1e-4) << what;
    EXPECT_GT(max_relative_difference(lin.weight.grad, gw_fp32), 1e-4) << what;
  }
}

// Conv2d in bf16-mixed against functional::conv2d in fp32 on the rounded x, W (and dy):
// im2col only copies (and zero-pads), so rounding x before it is rounding its columns.
TEST(MixedPrecisionLayers, Conv2dEqualsFp32OnRoundedOperands) {
  struct Geometry {
    const char* name;
    int kh, kw;
    F::Conv2dOptions options;
  };
  F::Conv2dOptions padded, strided, pointwise;
  padded.padding_h = padded.padding_w = 1;
  strided.stride_h = 2;
  strided.padding_w = 1;
  strided.dilation_w = 2;
  const Geometry geometries[] = {{"3x3 same", 3, 3, padded}, {"3x2 strided dilated", 3, 2, strided},
                                 {"1x1 pointwise", 1, 1, pointwise}};
  const std::int64_t c_in = 4, c_out = 6;
  for (const Geometry& g : geometries) {
    nn::Conv2d conv(c_in, c_out, g.kh, g.kw, g.options);
    fill_parameters(conv, 81);
    conv.set_compute_precision(Precision::bf16_mixed);
    const Tensor x = f32_random({2, c_in, 7, 6}, 82);
    conv.zero_grad();
    const Tensor y = conv.forward(x);
    const Tensor dy = f32_random(y.shape(), 83);
    const Tensor dx = conv.backward(dy);

    const Tensor xr = bf16_rounded(x), wr = bf16_rounded(conv.weight.value), dyr = bf16_rounded(dy);
    const Tensor y_ref = F::conv2d(xr, wr, conv.bias.value, g.options);
    Tensor gw_ref = Tensor::zeros(wr.shape(), DType::f32), no_bias;
    const Tensor dx_ref = F::conv2d_backward(dyr, xr, wr, gw_ref, no_bias, g.options);
    const Tensor ax = magnitude(xr), aw = magnitude(wr), ady = magnitude(dyr);
    const Tensor y_mag = F::conv2d(ax, aw, magnitude(conv.bias.value), g.options);
    Tensor gw_mag = Tensor::zeros(aw.shape(), DType::f64), unused;
    const Tensor dx_mag = F::conv2d_backward(ady, ax, aw, gw_mag, unused, g.options);
    const std::int64_t window = c_in * g.kh * g.kw;
    // dx: every input pixel collects at most c_out * kh * kw products (col2im adds them).
    expect_same_bf16_result(y, y_ref, y_mag, window + 1, std::string("Conv2d y ") + g.name);
    expect_same_bf16_result(dx, dx_ref, dx_mag, c_out * g.kh * g.kw, std::string("Conv2d dx ") + g.name);
    // dW sums over both samples' output pixels.
    expect_same_bf16_result(conv.weight.grad, gw_ref, gw_mag, y.numel() / c_out, std::string("Conv2d dW ") + g.name);
    Tensor gb_ref = Tensor::zeros({c_out}, DType::f32), no_weight;
    (void)F::conv2d_backward(dy, xr, wr, no_weight, gb_ref, g.options);
    EXPECT_TRUE(bit_identical(conv.bias.grad, gb_ref)) << g.name;

    const Tensor y_fp32 = F::conv2d(x, conv.weight.value, conv.bias.value, g.options);
    Tensor gw_fp32 = Tensor::zeros(wr.shape(), DType::f32);
    const Tensor dx_fp32 = F::conv2d_backward(dy, x, conv.weight.value, gw_fp32, no_bias, g.options);
    EXPECT_GT(max_relative_difference(y, y_fp32), 1e-4) << g.name;
    EXPECT_GT(max_relative_difference(dx, dx_fp32), 1e-4) << g.name;
    EXPECT_GT(max_relative_difference(conv.weight.grad, gw_fp32), 1e-4) << g.name;
  }
}

// A two-layer stack's forward and backward, as a fresh bf16-mixed twin computes them.
struct StackResult {
  Tensor y, dx, grad0;
};

StackResult run_stack(nn::Module& m, const Tensor& x, const Tensor& dy, nn::Module& first_linear) {
  m.zero_grad();
  StackResult r;
  r.y = m.forward(x);
  r.dx = m.backward(dy);
  r.grad0 = first_linear.named_parameters()[0].second->grad.clone();
  return r;
}

std::unique_ptr<nn::Sequential> linear_stack(std::uint64_t seed) {
  auto s = std::make_unique<nn::Sequential>();
  fill_parameters(s->append(std::make_unique<nn::Linear>(8, 6)), seed);
  fill_parameters(s->append(std::make_unique<nn::Linear>(6, 3)), seed + 1);
  return s;
}

TEST(MixedPrecisionLayers, SetComputePrecisionReachesCheckpointedAndReplacedLayers) {
  const Tensor x = f32_random({5, 8}, 91), dy = f32_random({5, 3}, 92);

  // The reference: the stack with each Linear set to bf16-mixed directly.
  auto reference = linear_stack(93);
  for (const auto& [path, m] : reference->named_modules()) {
    if (m->type_name() == "Linear") m->set_compute_precision(Precision::bf16_mixed);
  }
  const StackResult want = run_stack(*reference, x, dy, reference->at("0"));
  auto fp32 = linear_stack(93);
  const StackResult plain = run_stack(*fp32, x, dy, fp32->at("0"));
  EXPECT_GT(max_relative_difference(want.y, plain.y), 1e-4);

  // Set on the model above an activation checkpoint whose inner block is not a child:
  // the wrapper forwards it. Before and after wrapping alike.
  for (bool set_before_wrapping : {false, true}) {
    const std::string what = set_before_wrapping ? "set before wrapping" : "set after wrapping";
    auto inner = linear_stack(93);
    nn::Module* first = &inner->at("0");
    if (set_before_wrapping) inner->set_compute_precision(Precision::bf16_mixed);
    nn::Sequential model;
    auto& wrapper = model.append(std::make_unique<nn::ActivationCheckpoint>(std::move(inner)));
    if (!set_before_wrapping) model.set_compute_precision(Precision::bf16_mixed);
    EXPECT_EQ(first->compute_precision(), Precision::bf16_mixed) << what;
    EXPECT_EQ(wrapper.inner().at("1").compute_precision(), Precision::bf16_mixed) << what;
    const StackResult got = run_stack(model, x, dy, *first);
    // The same layers on the same data in the same precision: the same numbers.
    EXPECT_TRUE(bit_identical(got.y, want.y)) << what;
    EXPECT_TRUE(bit_identical(got.dx, want.dx)) << what;
    EXPECT_TRUE(bit_identical(got.grad0, want.grad0)) << what;
  }

  // A module put in place of a bf16-mixed one computes in bf16-mixed.
  auto model = linear_stack(93);
  model->set_compute_precision(Precision::bf16_mixed);
  auto replacement = std::make_unique<nn::Linear>(8, 6);
  EXPECT_EQ(replacement->compute_precision(), Precision::fp32);
  replacement->weight.value.copy_from(model->at("0").named_parameters()[0].second->value);
  replacement->bias.value.copy_from(model->at("0").named_parameters()[1].second->value);
  const std::unique_ptr<nn::Module> old = model->replace("0", std::move(replacement));
  EXPECT_EQ(model->at("0").compute_precision(), Precision::bf16_mixed);
  const StackResult got = run_stack(*model, x, dy, model->at("0"));
  EXPECT_TRUE(bit_identical(got.y, want.y));
  EXPECT_TRUE(bit_identical(got.dx, want.dx));
  EXPECT_TRUE(bit_identical(got.grad0, want.grad0));

  // And back: fp32 everywhere gives the fp32 numbers.
  model->set_compute_precision(Precision::fp32);
  const StackResult back = run_stack(*model, x, dy, model->at("0"));
  EXPECT_TRUE(bit_identical(back.y, plain.y));
  EXPECT_TRUE(bit_identical(back.dx, plain.dx));
}

TEST(MixedPrecisionLayers, PrecisionNamesParseAndErrorsNameTheKey) {
  EXPECT_EQ(precision_name(Precision::fp32), "fp32");
  EXPECT_EQ(precision_name(Precision::bf16_mixed), "bf16-mixed");
  EXPECT_EQ(parse_precision("bf16-mixed"), Precision::bf16_mixed);
  EXPECT_EQ(parse_precision("fp32"), Precision::fp32);
  // A bad config value is a ConfigError, as every enum parser raises (detail/enum_table.hpp).
  expect_error<ConfigError>([] { (void)parse_precision("bf16", "training.precision"); },
                            {"training.precision", "'bf16'", "fp32", "bf16-mixed"});
}

}  // namespace
