// GELU, SiLU, LayerNorm and RMSNorm: forward against scalar formulas, backward against
// finite differences, f32 vs f64, accumulation and errors.

#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/norm.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

TEST(Activation, GeluAndSiluMatchScalarFormulas) {
  // Includes large |x| where a naive sigmoid would overflow.
  std::vector<double> xv = random_values(24, 601);
  for (double& v : xv) v *= 4;
  xv.push_back(-800.0);
  xv.push_back(800.0);
  xv.push_back(0.0);
  Tensor x = make_tensor(xv, {static_cast<std::int64_t>(xv.size())}, DType::f64);
  nn::GELU gelu;
  nn::SiLU silu;
  const auto g = to_doubles(gelu.forward(x));
  const auto s = to_doubles(silu.forward(x));
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    EXPECT_NEAR(g[i], 0.5 * v * std::erfc(-v / std::sqrt(2.0)), 1e-13 * std::max(1.0, std::abs(v))) << v;
    const double sig = v < -700 ? 0.0 : 1.0 / (1.0 + std::exp(-v));
    EXPECT_NEAR(s[i], v * sig, 1e-13 * std::max(1.0, std::abs(v))) << v;
    EXPECT_TRUE(std::isfinite(s[i]));
  }
  // Known values: GELU(1) = Phi(1) = 0.8413447460685429, SiLU(1) = 1/(1+e^-1).
  Tensor one = make_tensor({1.0}, {1}, DType::f64);
  EXPECT_NEAR(to_doubles(F::gelu(one))[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(to_doubles(F::silu(one))[0], 0.7310585786300049, 1e-15);
  EXPECT_EQ(gelu.type_name(), "GELU");
  EXPECT_EQ(silu.type_name(), "SiLU");
  EXPECT_TRUE(gelu.named_parameters().empty());
}

TEST(Activation, BackwardMatchesFiniteDifferences) {
  nn::GELU gelu;
  check_gradients(gelu, random_tensor({3, 5}, DType::f64, 611, 3.0), 612);
  nn::SiLU silu;
  check_gradients(silu, random_tensor({2, 2, 4}, DType::f64, 613, 3.0), 614);
}

TEST(Activation, F32MatchesF64) {
  Tensor x32 = random_tensor({40}, DType::f32, 621, 5.0);
  Tensor x64 = make_tensor(to_doubles(x32), {40}, DType::f64);
  expect_close(to_doubles(F::gelu(x32)), to_doubles(F::gelu(x64)), 1e-6, "gelu");
  expect_close(to_doubles(F::silu(x32)), to_doubles(F::silu(x64)), 1e-6, "silu");
  Tensor dy32 = random_tensor({40}, DType::f32, 622);
  Tensor dy64 = make_tensor(to_doubles(dy32), {40}, DType::f64);
  expect_close(to_doubles(F::gelu_backward(dy32, x32)), to_doubles(F::gelu_backward(dy64, x64)), 1e-6, "gelu'");
  expect_close(to_doubles(F::silu_backward(dy32, x32)), to_doubles(F::silu_backward(dy64, x64)), 1e-6, "silu'");
}

TEST(Activation, Errors) {
  nn::GELU gelu;
  expect_error<InvalidArgument>([&] { gelu.backward(Tensor::zeros({2}, DType::f32)); },
                                {"GELU", "without a preceding forward"});
  Tensor ids = Tensor::zeros({2}, DType::i64);
  expect_error<ShapeError>([&] { gelu.forward(ids); }, {"GELU", ids.str()});
  Tensor x = Tensor::zeros({2, 3}, DType::f32);
  Tensor dy = Tensor::zeros({3, 2}, DType::f32);
  expect_error<ShapeError>([&] { F::silu_backward(dy, x); }, {"nn::functional::silu_backward", dy.str(), x.str()});
  Tensor dy64 = Tensor::zeros({2, 3}, DType::f64);
  expect_error<ShapeError>([&] { F::gelu_backward(dy64, x); }, {"gelu_backward", dy64.str(), x.str()});
}

namespace {

// Per row: (x - mean) / sqrt(var + eps) * g + b, var the biased variance computed as
// E[(x - E x)^2] in long double.
std::vector<double> naive_layer_norm(const std::vector<double>& x, const std::vector<double>& g,
                                     const std::vector<double>& b, std::size_t n, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    long double mean = 0, var = 0;
    for (std::size_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (std::size_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= n;
    for (std::size_t i = 0; i < n; ++i) {
      long double v = (x[r * n + i] - mean) / std::sqrt(var + eps);
      if (!g.empty()) v = v * g[i] + b[i];
      y[r * n + i] = static_cast<double>(v);
    }
  }
  return y;
}

std::vector<double> naive_rms_norm(const std::vector<double>& x, const std::vector<double>& g, std::size_t n,
                                   double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    long double ms = 0;
    for (std::size_t i = 0; i < n; ++i) ms += static_cast<long double>(x[r * n + i]) * x[r * n + i];
    ms /= n;
    for (std::size_t i = 0; i < n; ++i) y[r * n + i] = static_cast<double>(x[r * n + i] / std::sqrt(ms + eps) * g[i]);
  }
  return y;
}

}  // namespace

TEST(Norm, ParametersAndInitSpecs) {
  nn::LayerNorm ln(6);
  EXPECT_EQ(ln.type_name(), "LayerNorm");
  EXPECT_DOUBLE_EQ(ln.eps(), 1e-5);
  EXPECT_TRUE(ln.affine());
  auto names = ln.named_parameters("norm");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "norm.weight");
  EXPECT_EQ(names[1].first, "norm.bias");
  EXPECT_EQ(ln.weight.init.type, InitType::ones);
  EXPECT_EQ(ln.bias.init.type, InitType::zeros);
  EXPECT_EQ(ln.weight.value.shape(), (Shape{6}));
  nn::LayerNorm plain(6, 1e-3, false);
  EXPECT_FALSE(plain.affine());
  EXPECT_TRUE(plain.named_parameters().empty());
  nn::RMSNorm rms(5);
  EXPECT_EQ(rms.type_name(), "RMSNorm");
  EXPECT_DOUBLE_EQ(rms.eps(), 1e-6);
  ASSERT_EQ(rms.named_parameters().size(), 1u);
  EXPECT_EQ(rms.weight.init.type, InitType::ones);
}

TEST(Norm, ForwardMatchesNaiveReference) {
  const std::size_t n = 7;
  // Rows with a large common offset check that the variance does not cancel.
  std::vector<double> xv = random_values(3 * 2 * n, 701);
  for (std::size_t i = 0; i < n; ++i) xv[i] += 1000.0;
  Tensor x = make_tensor(xv, {3, 2, static_cast<std::int64_t>(n)}, DType::f64);

  nn::LayerNorm ln(n, 1e-5, true, DType::f64);
  fill_parameters(ln, 702);
  expect_close(to_doubles(ln.forward(x)),
               naive_layer_norm(xv, to_doubles(ln.weight.value), to_doubles(ln.bias.value), n, 1e-5), 1e-12,
               "LayerNorm");
  nn::LayerNorm plain(n, 1e-2, false, DType::f64);
  expect_close(to_doubles(plain.forward(x)), naive_layer_norm(xv, {}, {}, n, 1e-2), 1e-12, "LayerNorm no affine");

  nn::RMSNorm rms(n, 1e-6, DType::f64);
  fill_parameters(rms, 703);
  expect_close(to_doubles(rms.forward(x)), naive_rms_norm(xv, to_doubles(rms.weight.value), n, 1e-6), 1e-12,
               "RMSNorm");

  // Saved statistics: one per row.
  Tensor mean, rstd;
  F::layer_norm(x, Tensor(), Tensor(), 1e-5, mean, rstd);
  ASSERT_EQ(mean.shape(), (Shape{6}));
  ASSERT_EQ(rstd.shape(), (Shape{6}));
  double m0 = 0;
  for (std::size_t i = 0; i < n; ++i) m0 += xv[i];
  EXPECT_NEAR(to_doubles(mean)[0], m0 / n, 1e-12);
}

TEST(Norm, BackwardMatchesFiniteDifferences) {
  nn::LayerNorm ln(5, 1e-5, true, DType::f64);
  fill_parameters(ln, 711);
  check_gradients(ln, random_tensor({2, 3, 5}, DType::f64, 712), 713);
  nn::LayerNorm plain(4, 1e-3, false, DType::f64);
  check_gradients(plain, random_tensor({3, 4}, DType::f64, 714), 715);
  nn::RMSNorm rms(6, 1e-6, DType::f64);
  fill_parameters(rms, 716);
  check_gradients(rms, random_tensor({4, 6}, DType::f64, 717), 718);
}

TEST(Norm, F32ForwardMatchesF64AndAccumulates) {
  nn::LayerNorm l64(8, 1e-5, true, DType::f64), l32(8, 1e-5, true, DType::f32);
  fill_parameters(l64, 721);
  copy_parameters(l64, l32);
  nn::RMSNorm r64(8, 1e-6, DType::f64), r32(8, 1e-6, DType::f32);
  fill_parameters(r64, 722);
  copy_parameters(r64, r32);
  Tensor x32 = random_tensor({5, 8}, DType::f32, 723, 3.0);
  Tensor x64 = make_tensor(to_doubles(x32), {5, 8}, DType::f64);
  expect_close(to_doubles(l32.forward(x32)), to_doubles(l64.forward(x64)), 1e-5, "LayerNorm f32 vs f64");
  expect_close(to_doubles(r32.forward(x32)), to_doubles(r64.forward(x64)), 1e-5, "RMSNorm f32 vs f64");
  check_accumulation(l64, x64, 724);
  check_accumulation(r64, x64, 725);
}

TEST(Norm, Errors) {
  nn::LayerNorm ln(6);
  Tensor bad = Tensor::zeros({2, 5}, DType::f32);
  expect_error<ShapeError>([&] { ln.forward(bad); }, {"LayerNorm(6, eps=1e-05, affine=true)", bad.str()});
  Tensor wrong_dtype = Tensor::zeros({2, 6}, DType::f64);
  expect_error<ShapeError>([&] { ln.forward(wrong_dtype); }, {"LayerNorm(6", wrong_dtype.str()});
  nn::RMSNorm rms(4);
  expect_error<ShapeError>([&] { rms.forward(bad); }, {"RMSNorm(4, eps=1e-06)", bad.str()});
  expect_error<InvalidArgument>([] { nn::LayerNorm(0); }, {"LayerNorm(0"});
  Tensor x = Tensor::zeros({2, 6}, DType::f32);
  Tensor gamma = Tensor::zeros({5}, DType::f32);
  Tensor mean, rstd;
  expect_error<ShapeError>([&] { F::layer_norm(x, gamma, Tensor(), 1e-5, mean, rstd); },
                           {"nn::functional::layer_norm", gamma.str(), x.str()});
  Tensor dy = Tensor::zeros({2, 6}, DType::f32);
  Tensor gg, gb;
  expect_error<InvalidArgument>([&] { F::layer_norm_backward(dy, x, Tensor(), Tensor(), Tensor(), gg, gb); },
                                {"layer_norm_backward", "mean"});
}
