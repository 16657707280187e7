// Conv2d and functional::conv2d: forward against a direct 7-loop convolution for many
// stride/padding/dilation/kernel combinations, backward against finite differences,
// f32 vs f64, accumulation and errors.

#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/functional.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

struct Case {
  std::int64_t n, c_in, h, w, c_out;
  int kh, kw;
  nn::Conv2dOptions o;
};

// Direct definition: y[n, co, oy, ox] = b[co] + sum_{ci, i, j} w[co, ci, i, j] *
// x[n, ci, oy*sh - ph + i*dh, ox*sw - pw + j*dw] (zero outside the image).
std::vector<double> naive_conv(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& b, const Case& c, std::int64_t oh, std::int64_t ow) {
  std::vector<double> y(static_cast<std::size_t>(c.n * c.c_out * oh * ow));
  for (std::int64_t n = 0; n < c.n; ++n)
    for (std::int64_t co = 0; co < c.c_out; ++co)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double s = b.empty() ? 0.0 : b[co];
          for (std::int64_t ci = 0; ci < c.c_in; ++ci)
            for (int i = 0; i < c.kh; ++i)
              for (int j = 0; j < c.kw; ++j) {
                const std::int64_t iy = oy * c.o.stride_h - c.o.padding_h + i * c.o.dilation_h;
                const std::int64_t ix = ox * c.o.stride_w - c.o.padding_w + j * c.o.dilation_w;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                s += w[((co * c.c_in + ci) * c.kh + i) * c.kw + j] * x[((n * c.c_in + ci) * c.h + iy) * c.w + ix];
              }
          y[((n * c.c_out + co) * oh + oy) * ow + ox] = s;
        }
  return y;
}

nn::Conv2dOptions opts(int sh, int sw, int ph, int pw, int dh, int dw) {
  nn::Conv2dOptions o;
  o.stride_h = sh;
  o.stride_w = sw;
  o.padding_h = ph;
  o.padding_w = pw;
  o.dilation_h = dh;
  o.dilation_w = dw;
  return o;
}

std::vector<Case> cases() {
  return {
      {2, 3, 5, 6, 4, 1, 1, {}},                           // pointwise fast path
      {2, 3, 7, 6, 4, 3, 3, {}},                           // plain 3x3
      {1, 2, 7, 9, 3, 3, 3, opts(2, 2, 1, 1, 1, 1)},       // stride 2, padding 1, uneven sizes
      {2, 2, 9, 8, 3, 3, 3, opts(1, 1, 0, 0, 2, 2)},       // dilation 2
      {1, 3, 6, 7, 2, 2, 3, opts(1, 2, 1, 0, 1, 1)},       // non-square kernel, per-axis stride
      {2, 2, 8, 11, 3, 3, 2, opts(2, 1, 1, 2, 2, 1)},      // everything per axis at once
      {1, 2, 5, 5, 2, 1, 1, opts(2, 2, 1, 1, 1, 1)},       // 1x1 with stride/padding (im2col path)
  };
}

std::string case_name(const Case& c) {
  return "conv N" + std::to_string(c.n) + " C" + std::to_string(c.c_in) + " " + std::to_string(c.h) + "x" +
         std::to_string(c.w) + " k" + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s" +
         std::to_string(c.o.stride_h) + "," + std::to_string(c.o.stride_w) + " p" + std::to_string(c.o.padding_h) +
         "," + std::to_string(c.o.padding_w) + " d" + std::to_string(c.o.dilation_h) + "," +
         std::to_string(c.o.dilation_w);
}

}  // namespace

TEST(Conv2d, OutputSizeFormulaAndErrors) {
  EXPECT_EQ(F::conv_output_size(7, 3, 2, 1, 1), 4);   // (7 + 2 - 3) / 2 + 1
  EXPECT_EQ(F::conv_output_size(9, 3, 1, 0, 2), 5);   // dilated extent 5
  EXPECT_EQ(F::conv_output_size(8, 3, 2, 1, 2), 3);   // (8 + 2 - 5) / 2 + 1
  EXPECT_EQ(F::conv_output_size(5, 1, 1, 0, 1), 5);
  EXPECT_EQ(F::conv_output_size(3, 5, 1, 1, 1), 1);   // padding makes it fit exactly
  expect_error<ShapeError>([] { F::conv_output_size(2, 3, 1, 0, 1); }, {"input extent 2", "kernel extent 3"});
  expect_error<InvalidArgument>([] { F::conv_output_size(5, 3, 0, 0, 1); }, {"stride 0"});
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  for (const Case& c : cases()) {
    for (bool with_bias : {true, false}) {
      nn::Conv2d conv(c.c_in, c.c_out, c.kh, c.kw, c.o, with_bias, DType::f64);
      fill_parameters(conv, 101);
      Tensor x = random_tensor({c.n, c.c_in, c.h, c.w}, DType::f64, 102);
      Tensor y = conv.forward(x);
      const std::int64_t oh = F::conv_output_size(c.h, c.kh, c.o.stride_h, c.o.padding_h, c.o.dilation_h);
      const std::int64_t ow = F::conv_output_size(c.w, c.kw, c.o.stride_w, c.o.padding_w, c.o.dilation_w);
      ASSERT_EQ(y.shape(), (Shape{c.n, c.c_out, oh, ow})) << case_name(c);
      const auto ref = naive_conv(to_doubles(x), to_doubles(conv.weight.value),
                                  with_bias ? to_doubles(conv.bias.value) : std::vector<double>{}, c, oh, ow);
      expect_close(to_doubles(y), ref, 1e-13, case_name(c));
    }
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    nn::Conv2d conv(c.c_in, c.c_out, c.kh, c.kw, c.o, true, DType::f64);
    fill_parameters(conv, 201);
    SCOPED_TRACE(case_name(c));
    check_gradients(conv, random_tensor({c.n, c.c_in, c.h, c.w}, DType::f64, 202), 203);
  }
  nn::Conv2d no_bias(2, 2, 3, 2, opts(2, 1, 1, 1, 1, 2), false, DType::f64);
  fill_parameters(no_bias, 204);
  check_gradients(no_bias, random_tensor({1, 2, 6, 7}, DType::f64, 205), 206);
}

TEST(Conv2d, F32ForwardMatchesF64) {
  const Case c{2, 3, 9, 7, 4, 3, 2, opts(2, 1, 1, 1, 2, 1)};
  nn::Conv2d c64(c.c_in, c.c_out, c.kh, c.kw, c.o, true, DType::f64);
  nn::Conv2d c32(c.c_in, c.c_out, c.kh, c.kw, c.o, true, DType::f32);
  fill_parameters(c64, 301);
  copy_parameters(c64, c32);
  Tensor x32 = random_tensor({c.n, c.c_in, c.h, c.w}, DType::f32, 302);
  Tensor x64 = make_tensor(to_doubles(x32), x32.shape(), DType::f64);
  expect_close(to_doubles(c32.forward(x32)), to_doubles(c64.forward(x64)), 1e-5, "f32 vs f64");
}

TEST(Conv2d, GradientsAccumulateOverBackwardCalls) {
  nn::Conv2d conv(2, 3, 3, 3, opts(2, 2, 1, 1, 1, 1), true, DType::f64);
  fill_parameters(conv, 401);
  check_accumulation(conv, random_tensor({2, 2, 7, 6}, DType::f64, 402), 403);
  nn::Conv2d pointwise(3, 2, 1, 1, {}, true, DType::f64);
  fill_parameters(pointwise, 404);
  check_accumulation(pointwise, random_tensor({2, 3, 4, 5}, DType::f64, 405), 406);
}

TEST(Conv2d, AccessorsParametersAndInitSpecs) {
  nn::Conv2d conv(3, 8, 3, 5, opts(2, 1, 1, 2, 1, 1));
  EXPECT_EQ(conv.type_name(), "Conv2d");
  EXPECT_EQ(conv.in_channels(), 3);
  EXPECT_EQ(conv.out_channels(), 8);
  EXPECT_EQ(conv.kernel_h(), 3);
  EXPECT_EQ(conv.kernel_w(), 5);
  EXPECT_EQ(conv.groups(), 1);
  EXPECT_EQ(conv.options().stride_h, 2);
  EXPECT_EQ(conv.options().padding_w, 2);
  EXPECT_EQ(conv.weight.value.shape(), (Shape{8, 3, 3, 5}));
  EXPECT_EQ(conv.bias.value.shape(), (Shape{8}));
  EXPECT_EQ(conv.weight.init.type, InitType::kaiming_uniform);
  EXPECT_DOUBLE_EQ(conv.bias.init.high, 1.0 / std::sqrt(45.0));
  auto names = conv.named_parameters();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "weight");
  EXPECT_EQ(names[1].first, "bias");
}

TEST(Conv2d, ErrorsNameTheLayer) {
  expect_error<InvalidArgument>([] { nn::Conv2d(4, 4, 3, 3, {}, true, DType::f32, Device::host(), 2); },
                                {"Conv2d(4, 4, kernel=3x3", "groups = 2"});
  nn::Conv2d conv(3, 2, 3, 3);
  Tensor wrong_channels = Tensor::zeros({1, 4, 5, 5}, DType::f32);
  expect_error<ShapeError>([&] { conv.forward(wrong_channels); }, {"Conv2d(3, 2, kernel=3x3", wrong_channels.str()});
  Tensor three_d = Tensor::zeros({3, 5, 5}, DType::f32);
  expect_error<ShapeError>([&] { conv.forward(three_d); }, {"Conv2d(3, 2", three_d.str()});
  Tensor too_small = Tensor::zeros({1, 3, 2, 5}, DType::f32);
  expect_error<ShapeError>([&] { conv.forward(too_small); }, {"Conv2d(3, 2", too_small.str(), "kernel extent"});
  Tensor wrong_dtype = Tensor::zeros({1, 3, 5, 5}, DType::f64);
  expect_error<ShapeError>([&] { conv.forward(wrong_dtype); }, {"Conv2d(3, 2", wrong_dtype.str()});

  Tensor x = Tensor::zeros({1, 3, 5, 5}, DType::f32);
  Tensor w = Tensor::zeros({2, 4, 3, 3}, DType::f32);
  expect_error<ShapeError>([&] { F::conv2d(x, w, Tensor(), {}); }, {"nn::functional::conv2d", x.str(), w.str()});
  Tensor w_ok = Tensor::zeros({2, 3, 3, 3}, DType::f32);
  Tensor gw, gb;
  Tensor dy_bad = Tensor::zeros({1, 2, 4, 4}, DType::f32);
  expect_error<ShapeError>([&] { F::conv2d_backward(dy_bad, x, w_ok, gw, gb, {}); },
                           {"nn::functional::conv2d_backward", dy_bad.str(), "[1, 2, 3, 3]"});
}
