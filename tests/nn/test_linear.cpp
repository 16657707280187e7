// Linear and functional::linear: forward against a naive loop reference, backward
// against finite differences, f32 vs f64, accumulation and error messages.

#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

// y[r, o] = sum_i x[r, i] w[o, i] + b[o]
std::vector<double> naive_linear(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, std::int64_t rows, std::int64_t in, std::int64_t out) {
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (std::int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

}  // namespace

TEST(Linear, ParametersShapesAndInitSpecs) {
  nn::Linear lin(6, 4);
  EXPECT_EQ(lin.in_features(), 6);
  EXPECT_EQ(lin.out_features(), 4);
  EXPECT_TRUE(lin.has_bias());
  EXPECT_EQ(lin.type_name(), "Linear");
  auto params = lin.named_parameters("proj");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "proj.weight");
  EXPECT_EQ(params[1].first, "proj.bias");
  EXPECT_EQ(lin.weight.value.shape(), (Shape{4, 6}));
  EXPECT_EQ(lin.weight.grad.shape(), (Shape{4, 6}));
  EXPECT_EQ(lin.weight.global_shape, (Shape{4, 6}));
  EXPECT_EQ(lin.bias.value.shape(), (Shape{4}));
  EXPECT_EQ(lin.weight.init.type, InitType::kaiming_uniform);
  EXPECT_DOUBLE_EQ(lin.weight.init.negative_slope, std::sqrt(5.0));
  EXPECT_EQ(lin.bias.init.type, InitType::uniform);
  EXPECT_DOUBLE_EQ(lin.bias.init.high, 1.0 / std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(lin.bias.init.low, -1.0 / std::sqrt(6.0));
  for (double v : to_doubles(lin.weight.value)) EXPECT_EQ(v, 0.0);

  nn::Linear no_bias(3, 2, false, DType::f64);
  EXPECT_FALSE(no_bias.has_bias());
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_EQ(no_bias.weight.value.dtype(), DType::f64);
}

TEST(Linear, ForwardMatchesNaiveReference) {
  for (bool with_bias : {true, false}) {
    nn::Linear lin(5, 3, with_bias, DType::f64);
    fill_parameters(lin, 11);
    // 3-D input: the leading dims are flattened into rows.
    Tensor x = random_tensor({2, 3, 5}, DType::f64, 12);
    Tensor y = lin.forward(x);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
    const auto ref = naive_linear(to_doubles(x), to_doubles(lin.weight.value),
                                  with_bias ? to_doubles(lin.bias.value) : std::vector<double>{}, 6, 5, 3);
    expect_close(to_doubles(y), ref, 1e-13, "Linear forward");
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  nn::Linear lin(4, 3, true, DType::f64);
  fill_parameters(lin, 21);
  check_gradients(lin, random_tensor({2, 2, 4}, DType::f64, 22), 23);
  nn::Linear no_bias(3, 5, false, DType::f64);
  fill_parameters(no_bias, 24);
  check_gradients(no_bias, random_tensor({4, 3}, DType::f64, 25), 26);
}

TEST(Linear, F32ForwardMatchesF64) {
  nn::Linear l64(7, 5, true, DType::f64);
  nn::Linear l32(7, 5, true, DType::f32);
  fill_parameters(l64, 31);
  copy_parameters(l64, l32);
  const auto xv = random_values(3 * 7, 32);
  // Round the input to f32 once so both layers see the same values.
  Tensor x32 = make_tensor(xv, {3, 7}, DType::f32);
  Tensor x64 = make_tensor(to_doubles(x32), {3, 7}, DType::f64);
  expect_close(to_doubles(l32.forward(x32)), to_doubles(l64.forward(x64)), 1e-5, "f32 vs f64");
}

TEST(Linear, GradientsAccumulateOverBackwardCalls) {
  nn::Linear lin(4, 3, true, DType::f64);
  fill_parameters(lin, 41);
  check_accumulation(lin, random_tensor({5, 4}, DType::f64, 42), 43);
}

TEST(Linear, ZeroGradClearsAndBackwardNeedsForward) {
  nn::Linear lin(2, 2, true, DType::f64);
  fill_parameters(lin, 51);
  Tensor x = random_tensor({1, 2}, DType::f64, 52);
  lin.forward(x);
  lin.backward(random_tensor({1, 2}, DType::f64, 53));
  lin.zero_grad();
  for (double v : to_doubles(lin.weight.grad)) EXPECT_EQ(v, 0.0);
  // The cached input is released by backward: a second backward is an error.
  expect_error<InvalidArgument>([&] { lin.backward(random_tensor({1, 2}, DType::f64, 54)); },
                                {"Linear(in_features=2, out_features=2", "without a preceding forward"});
}

TEST(Linear, ErrorsNameTheLayerAndTensors) {
  nn::Linear lin(4, 3);
  Tensor bad = Tensor::zeros({2, 5}, DType::f32);
  expect_error<ShapeError>([&] { lin.forward(bad); }, {"Linear(in_features=4, out_features=3", bad.str()});
  Tensor wrong_dtype = Tensor::zeros({2, 4}, DType::f64);
  expect_error<ShapeError>([&] { lin.forward(wrong_dtype); }, {"Linear(", wrong_dtype.str(), lin.weight.value.str()});
  expect_error<InvalidArgument>([] { nn::Linear(0, 3); }, {"Linear", "in_features 0"});

  // Functional messages name the function and both tensors.
  Tensor w = Tensor::zeros({3, 4}, DType::f32);
  expect_error<ShapeError>([&] { F::linear(bad, w, Tensor()); }, {"nn::functional::linear", bad.str(), w.str()});
  Tensor b_bad = Tensor::zeros({4}, DType::f32);
  expect_error<ShapeError>([&] { F::linear(Tensor::zeros({2, 4}, DType::f32), w, b_bad); },
                           {"nn::functional::linear", b_bad.str(), w.str()});
  Tensor gw, gb;
  Tensor x = Tensor::zeros({2, 4}, DType::f32);
  Tensor dy_bad = Tensor::zeros({2, 4}, DType::f32);
  expect_error<ShapeError>([&] { F::linear_backward(dy_bad, x, w, gw, gb); },
                           {"nn::functional::linear_backward", dy_bad.str(), x.str()});
}

TEST(Linear, DeviceTensorsAreUnsupportedOnTheHostPath) {
  // A non-owning view stands in for device memory: the check fires before any access.
  alignas(8) static float fake[12];
  Tensor x_dev = Tensor::view(fake, {3, 4}, DType::f32, Device::cuda(0));
  Tensor w = Tensor::zeros({2, 4}, DType::f32);
  expect_error<UnsupportedError>([&] { F::linear(x_dev, w, Tensor()); },
                                 {"nn::functional::linear", "CUDA compute backend", x_dev.str()});
  expect_error<UnsupportedError>([&] { F::gelu(x_dev); }, {"gelu", "CUDA"});
}

TEST(Linear, FunctionalBackwardSkipsUndefinedGradients) {
  Tensor x = random_tensor({3, 4}, DType::f64, 61);
  Tensor w = random_tensor({2, 4}, DType::f64, 62);
  Tensor dy = random_tensor({3, 2}, DType::f64, 63);
  Tensor gw, gb;  // undefined: only dx is wanted
  Tensor dx = F::linear_backward(dy, x, w, gw, gb);
  // dx = dy W
  const auto dyv = to_doubles(dy), wv = to_doubles(w);
  std::vector<double> ref(12, 0.0);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 4; ++i)
      for (int o = 0; o < 2; ++o) ref[r * 4 + i] += dyv[r * 2 + o] * wv[o * 4 + i];
  expect_close(to_doubles(dx), ref, 1e-13, "dx");
  EXPECT_FALSE(gw.defined());
}
