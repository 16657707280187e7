// The ONNX linear and convolution ops (src/onnx/ops_linear_conv.cpp) against hand values,
// an independent direct-loop reference (gathering windows for Conv, scattering for
// ConvTranspose), values PyTorch computed, and finite differences in f64.
#include <cmath>
#include <functional>
#include <numeric>

#include "onnx/broadcast.hpp"
#include "onnx/im2col_nd.hpp"
#include "op_test_support.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::test {
namespace {

// ---- Gemm

// op(A) op(B) * alpha + beta * C by hand loops.
std::vector<double> gemm_reference(const Value& a, bool ta, const Value& b, bool tb, double alpha, double beta,
                                   const std::vector<double>& c_full, std::int64_t m, std::int64_t k, std::int64_t n) {
  const auto av = a.tensor.to_vector<double>(), bv = b.tensor.to_vector<double>();
  std::vector<double> y(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t q = 0; q < k; ++q) s += av[ta ? q * m + i : i * k + q] * bv[tb ? j * k + q : q * n + j];
      y[i * n + j] = alpha * s + beta * (c_full.empty() ? 0.0 : c_full[i * n + j]);
    }
  return y;
}

TEST(OnnxOpsLinearConv, GemmHandValues) {
  NodeSpec node = make_node("Gemm", 3);
  // [[1,2],[3,4]] [[5,6],[7,8]] = [[19,22],[43,50]]; 2x that + 0.5 * [10, 20] per row.
  set_float(node, "alpha", 2.0);
  set_float(node, "beta", 0.5);
  const auto y =
      run(node, {f64_value({1, 2, 3, 4}, {2, 2}), f64_value({5, 6, 7, 8}, {2, 2}), f64_value({10, 20}, {2})});
  expect_close_values(y[0], {2, 2}, {43, 54, 91, 110});
}

TEST(OnnxOpsLinearConv, GemmTransposesAndBroadcastC) {
  const std::int64_t m = 3, k = 4, n = 5;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape& c_shape : {Shape{m, n}, Shape{1, n}, Shape{m, 1}, Shape{}}) {
        NodeSpec node = make_node("Gemm", 3);
        set_int(node, "transA", ta);
        set_int(node, "transB", tb);
        set_float(node, "alpha", 0.7);
        set_float(node, "beta", -1.3);
        const Value a = random_value(ta ? Shape{k, m} : Shape{m, k}, 1);
        const Value b = random_value(tb ? Shape{n, k} : Shape{k, n}, 2);
        const Value c = random_value(c_shape, 3);
        std::vector<double> c_full(static_cast<std::size_t>(m * n));
        const auto cv = c.tensor.to_vector<double>();
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j)
            c_full[i * n + j] = cv[c_shape.size() < 2 ? (c_shape.empty() ? 0 : j)
                                                      : (c_shape[0] == 1   ? j
                                                         : c_shape[1] == 1 ? i
                                                                           : i * n + j)];
        expect_close_values(run(node, {a, b, c})[0], {m, n}, gemm_reference(a, ta, b, tb, 0.7, -1.3, c_full, m, k, n));
        check_gradients(node, {a, b, c});
      }
}

TEST(OnnxOpsLinearConv, GemmWithoutCAndF32) {
  NodeSpec node = make_node("Gemm", 2);
  const Value a = random_value({2, 3}, 4), b = random_value({3, 4}, 5);
  check_gradients(node, {a, b});
  const auto y = run(node, {random_value({2, 3}, 4, DType::f32), random_value({3, 4}, 5, DType::f32)});
  EXPECT_EQ(y[0].type, ElementType::f32);
  const auto expected = gemm_reference(a, false, b, false, 1.0, 0.0, {}, 2, 3, 4);
  const auto got = y[0].tensor.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6);
}

TEST(OnnxOpsLinearConv, GemmRefusesIntegersAndOldOpsets) {
  NodeSpec node = make_node("Gemm", 2);
  const Value i = Value::integers({1, 2, 3, 4}, {2, 2});
  try {
    run(node, {i, i});
    FAIL() << "integer Gemm ran";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("type int64 is not supported"), std::string::npos) << e.what();
  }
  try {
    builtin_ops().create(make_node("Gemm", 3, 1, 6));
    FAIL() << "Gemm-6 was accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("Gemm before opset 7 is not supported"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run(make_node("Gemm", 1), {random_value({2, 2}, 1)}), InvalidArgument);
}

// ---- MatMul

// Batched numpy matmul by hand loops over already-broadcast operand shapes.
std::vector<double> matmul_reference(const Value& a, const Value& b, const Shape& batch, std::int64_t m, std::int64_t k,
                                     std::int64_t n) {
  const auto av = a.tensor.to_vector<double>(), bv = b.tensor.to_vector<double>();
  Shape a_batch(a.shape().begin(), a.shape().end() - std::min<std::ptrdiff_t>(2, a.shape().size()));
  Shape b_batch(b.shape().begin(), b.shape().end() - std::min<std::ptrdiff_t>(2, b.shape().size()));
  if (a.shape().size() == 1) a_batch.clear();
  if (b.shape().size() == 1) b_batch.clear();
  const auto sa = broadcast_source_index(a_batch, batch), sb = broadcast_source_index(b_batch, batch);
  std::vector<double> y;
  for (std::size_t t = 0; t < sa.size(); ++t)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) s += av[sa[t] * m * k + i * k + q] * bv[sb[t] * k * n + q * n + j];
        y.push_back(s);
      }
  return y;
}

TEST(OnnxOpsLinearConv, MatMulHandValues) {
  const NodeSpec node = make_node("MatMul", 2);
  // 1-D . 1-D is a scalar; [2] x [2, 3] is [3]; [2, 3] x [3] is [2].
  expect_close_values(run(node, {f64_value({1, 2, 3}, {3}), f64_value({4, 5, 6}, {3})})[0], {}, {32});
  expect_close_values(run(node, {f64_value({1, 2}, {2}), iota_value({2, 3})})[0], {3}, {6, 9, 12});
  expect_close_values(run(node, {iota_value({2, 3}), f64_value({1, 0, -1}, {3})})[0], {2}, {-2, -2});
}

TEST(OnnxOpsLinearConv, MatMulBatchedAndBroadcast) {
  const NodeSpec node = make_node("MatMul", 2);
  struct Case {
    Shape a, b, batch, y;
    std::int64_t m, k, n;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {4, 5}, {2}, {2, 3, 5}, 3, 4, 5},              // B shared: folded into one GEMM
      {{2, 3, 4}, {2, 4, 5}, {2}, {2, 3, 5}, 3, 4, 5},           // batch against batch
      {{2, 1, 3, 4}, {3, 4, 2}, {2, 3}, {2, 3, 3, 2}, 3, 4, 2},  // batch dims broadcast both ways
      {{3, 4}, {2, 4, 5}, {2}, {2, 3, 5}, 3, 4, 5},              // A shared
      {{4}, {2, 4, 5}, {2}, {2, 5}, 1, 4, 5},                    // 1-D A
      {{2, 3, 4}, {4}, {2}, {2, 3}, 3, 4, 1},                    // 1-D B
  };
  for (const Case& c : cases) {
    const Value a = random_value(c.a, 11), b = random_value(c.b, 12);
    expect_close_values(run(node, {a, b})[0], c.y, matmul_reference(a, b, c.batch, c.m, c.k, c.n));
    check_gradients(node, {a, b});
  }
  check_gradients(node, {random_value({3}, 1), random_value({3}, 2)});
  EXPECT_THROW(run(node, {random_value({2, 3}, 1), random_value({4, 2}, 2)}), InvalidArgument);
}

// ---- Conv and ConvTranspose against direct loops.

struct ConvCase {
  Shape x, w;
  Shape stride, dilation, pad_begin;  // per spatial dim, as the op resolved them
  std::int64_t group = 1;
  bool bias = false;
};

// Odometer over a multi-index of `extent`: false once it wraps.
bool next_index(Shape& index, const Shape& extent) {
  for (std::size_t d = index.size(); d-- > 0;) {
    if (++index[d] < extent[d]) return true;
    index[d] = 0;
  }
  return false;
}

std::int64_t flat(const Shape& index, const Shape& extent) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < index.size(); ++d) f = f * extent[d] + index[d];
  return f;
}

// Visits every (narrow position o, kernel tap k, wide position i = o*s - p + k*d inside
// the wide field): the one relation Conv gathers along and ConvTranspose scatters along.
template <class F>
void for_each_tap(const ConvCase& c, const Shape& wide, const Shape& narrow, F&& f) {
  const Shape kernel(c.w.begin() + 2, c.w.end());
  Shape o(narrow.size(), 0);
  do {
    Shape k(kernel.size(), 0);
    do {
      Shape i(kernel.size());
      bool inside = true;
      for (std::size_t d = 0; d < i.size(); ++d) {
        i[d] = o[d] * c.stride[d] - c.pad_begin[d] + k[d] * c.dilation[d];
        inside = inside && i[d] >= 0 && i[d] < wide[d];
      }
      if (inside) f(flat(o, narrow), flat(k, kernel), flat(i, wide));
    } while (next_index(k, kernel));
  } while (next_index(o, narrow));
}

// Conv: y [N, M, narrow] from x [N, C, wide].
std::vector<double> conv_reference(const ConvCase& c, const Value& x, const Value& w, const Value& b,
                                   const Shape& y_shape) {
  const Shape wide(c.x.begin() + 2, c.x.end()), narrow(y_shape.begin() + 2, y_shape.end());
  const std::int64_t n_batch = c.x[0], cin = c.x[1], m_out = c.w[0], cg = c.w[1], mg = m_out / c.group;
  const std::int64_t taps = shape_numel(Shape(c.w.begin() + 2, c.w.end()));
  const auto xv = x.tensor.to_vector<double>(), wv = w.tensor.to_vector<double>();
  const std::int64_t wide_n = shape_numel(wide), narrow_n = shape_numel(narrow);
  std::vector<double> y(static_cast<std::size_t>(shape_numel(y_shape)), 0.0);
  for (std::int64_t n = 0; n < n_batch; ++n)
    for (std::int64_t m = 0; m < m_out; ++m) {
      const std::int64_t g = m / mg;
      for (std::int64_t cc = 0; cc < cg; ++cc) {
        const std::int64_t ch = g * cg + cc;
        for_each_tap(c, wide, narrow, [&](std::int64_t o, std::int64_t k, std::int64_t i) {
          y[(n * m_out + m) * narrow_n + o] += xv[(n * cin + ch) * wide_n + i] * wv[(m * cg + cc) * taps + k];
        });
      }
      if (c.bias)
        for (std::int64_t o = 0; o < narrow_n; ++o)
          y[(n * m_out + m) * narrow_n + o] += b.tensor.to_vector<double>()[m];
    }
  return y;
}

// ConvTranspose: y [N, M, wide] from x [N, C, narrow], w [C, M / group, kernel].
std::vector<double> conv_transpose_reference(const ConvCase& c, const Value& x, const Value& w, const Value& b,
                                             const Shape& y_shape) {
  const Shape narrow(c.x.begin() + 2, c.x.end()), wide(y_shape.begin() + 2, y_shape.end());
  const std::int64_t n_batch = c.x[0], cin = c.x[1], mg = c.w[1], m_out = mg * c.group, cpg = cin / c.group;
  const std::int64_t taps = shape_numel(Shape(c.w.begin() + 2, c.w.end()));
  const auto xv = x.tensor.to_vector<double>(), wv = w.tensor.to_vector<double>();
  const std::int64_t wide_n = shape_numel(wide), narrow_n = shape_numel(narrow);
  std::vector<double> y(static_cast<std::size_t>(shape_numel(y_shape)), 0.0);
  for (std::int64_t n = 0; n < n_batch; ++n)
    for (std::int64_t ch = 0; ch < cin; ++ch)
      for (std::int64_t mm = 0; mm < mg; ++mm) {
        const std::int64_t m = (ch / cpg) * mg + mm;
        for_each_tap(c, wide, narrow, [&](std::int64_t o, std::int64_t k, std::int64_t i) {
          y[(n * m_out + m) * wide_n + i] += xv[(n * cin + ch) * narrow_n + o] * wv[(ch * mg + mm) * taps + k];
        });
      }
  if (c.bias)
    for (std::int64_t n = 0; n < n_batch; ++n)
      for (std::int64_t m = 0; m < m_out; ++m)
        for (std::int64_t i = 0; i < wide_n; ++i) y[(n * m_out + m) * wide_n + i] += b.tensor.to_vector<double>()[m];
  return y;
}

struct ConvTest {
  std::string label;
  ConvCase c;
  std::function<void(NodeSpec&)> attributes;
  Shape y_shape;
};

void run_conv_test(const std::string& op_type, const ConvTest& t) {
  SCOPED_TRACE(op_type + " " + t.label);
  NodeSpec node = make_node(op_type, t.c.bias ? 3 : 2);
  t.attributes(node);
  if (t.c.group != 1) set_int(node, "group", t.c.group);
  const Value x = random_value(t.c.x, 21), w = random_value(t.c.w, 22);
  const std::int64_t out_channels = op_type == "Conv" ? t.c.w[0] : t.c.w[1] * t.c.group;
  const Value b = random_value({out_channels}, 23);
  std::vector<Value> inputs{x, w};
  if (t.c.bias) inputs.push_back(b);
  const auto y = run(node, inputs);
  ASSERT_EQ(y[0].shape(), t.y_shape);
  expect_close_values(
      y[0], t.y_shape,
      op_type == "Conv" ? conv_reference(t.c, x, w, b, t.y_shape) : conv_transpose_reference(t.c, x, w, b, t.y_shape));
  check_gradients(node, inputs);
  // f32 runs in its own precision.
  std::vector<Value> f32_inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    f32_inputs.push_back(random_value(inputs[i].shape(), 21 + i, DType::f32));
  const auto y32 = run(node, f32_inputs);
  EXPECT_EQ(y32[0].type, ElementType::f32);
  const auto v32 = y32[0].tensor.to_vector<float>();
  const auto v64 = y[0].tensor.to_vector<double>();
  for (std::size_t i = 0; i < v32.size(); ++i) EXPECT_NEAR(v32[i], v64[i], 1e-5);
}

TEST(OnnxOpsLinearConv, ConvHandValues) {
  // ONNX's documented example: a 5x5 ramp under a 3x3 box of ones.
  NodeSpec node = make_node("Conv", 2);
  set_ints(node, "kernel_shape", {3, 3});
  set_ints(node, "pads", {1, 1, 1, 1});
  const Value x = iota_value({1, 1, 5, 5}), w = f64_value(std::vector<double>(9, 1.0), {1, 1, 3, 3});
  expect_close_values(run(node, {x, w})[0], {1, 1, 5, 5}, {12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                                     117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84});
  set_ints(node, "pads", {0, 0, 0, 0});
  expect_close_values(run(node, {x, w})[0], {1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162});
  // Stride 2 with asymmetric padding (pad the top and bottom by 1, the sides not).
  set_ints(node, "strides", {2, 2});
  set_ints(node, "pads", {1, 0, 1, 0});
  expect_close_values(run(node, {x, w})[0], {1, 1, 3, 2}, {21, 33, 99, 117, 111, 123});
}

auto attrs(std::vector<std::pair<std::string, Shape>> lists, std::string auto_pad = "") {
  return [lists, auto_pad](NodeSpec& node) {
    for (const auto& entry : lists) set_ints(node, entry.first, entry.second);
    if (!auto_pad.empty()) set_string(node, "auto_pad", auto_pad);
  };
}

TEST(OnnxOpsLinearConv, ConvAgainstDirectLoops) {
  const std::vector<ConvTest> tests = {
      {"2-D plain with bias", {{2, 3, 5, 4}, {4, 3, 3, 2}, {1, 1}, {1, 1}, {0, 0}, 1, true}, attrs({}), {2, 4, 3, 3}},
      {"stride 2",
       {{1, 2, 7, 6}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
       attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}),
       {1, 3, 4, 3}},
      {"dilation 2",
       {{1, 2, 7, 7}, {2, 2, 3, 2}, {1, 1}, {2, 2}, {0, 1}, 1, true},
       attrs({{"dilations", {2, 2}}, {"pads", {0, 1, 0, 1}}}),
       {1, 2, 3, 7}},
      {"groups 2",
       {{2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},
       attrs({{"pads", {1, 1, 1, 1}}}),
       {2, 6, 5, 5}},
      {"depthwise",
       {{1, 3, 6, 5}, {3, 1, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 3, false},
       attrs({{"strides", {2, 1}}, {"pads", {1, 1, 1, 1}}}),
       {1, 3, 3, 5}},
      {"asymmetric pads",
       {{1, 2, 5, 6}, {2, 2, 2, 3}, {1, 2}, {1, 1}, {2, 0}, 1, false},
       attrs({{"strides", {1, 2}}, {"pads", {2, 0, 0, 1}}}),
       {1, 2, 6, 3}},
      {"SAME_UPPER",
       {{1, 2, 5, 6}, {2, 2, 2, 3}, {2, 2}, {1, 1}, {0, 0}, 1, true},
       attrs({{"strides", {2, 2}}}, "SAME_UPPER"),
       {1, 2, 3, 3}},
      {"SAME_LOWER",
       {{1, 2, 5, 6}, {2, 2, 2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, false},
       attrs({}, "SAME_LOWER"),
       {1, 2, 5, 6}},
      {"VALID",
       {{1, 1, 5, 6}, {1, 1, 3, 3}, {2, 2}, {1, 1}, {0, 0}, 1, false},
       attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}, "VALID"),
       {1, 1, 2, 2}},
      {"pointwise", {{2, 3, 4, 3}, {5, 3, 1, 1}, {1, 1}, {1, 1}, {0, 0}, 1, true}, attrs({}), {2, 5, 4, 3}},
      {"Conv1d",
       {{2, 3, 9}, {4, 3, 3}, {2}, {2}, {1}, 1, true},
       attrs({{"strides", {2}}, {"dilations", {2}}, {"pads", {1, 2}}}),
       {2, 4, 4}},
      {"Conv3d",
       {{1, 2, 4, 3, 4}, {2, 1, 2, 2, 3}, {1, 1, 2}, {1, 1, 1}, {1, 0, 1}, 2, true},
       attrs({{"strides", {1, 1, 2}}, {"pads", {1, 0, 1, 0, 0, 1}}}),
       {1, 2, 4, 2, 2}},
  };
  for (const ConvTest& t : tests) run_conv_test("Conv", t);
  // Again with the positions split into chunks of 5 and 7 columns' worth (the fields here
  // are small; large ones split the same way).
  for (const std::int64_t elements : {5, 7 * 18}) {
    set_im2col_chunk_elements(elements);
    for (const ConvTest& t : tests) run_conv_test("Conv", t);
  }
  set_im2col_chunk_elements(std::int64_t{1} << 22);
}

TEST(OnnxOpsLinearConv, ConvTransposeHandValues) {
  // ONNX's documented example: a 3x3 ramp through a 3x3 kernel of ones, two output channels.
  NodeSpec node = make_node("ConvTranspose", 2);
  const Value x = iota_value({1, 1, 3, 3}), w = f64_value(std::vector<double>(18, 1.0), {1, 2, 3, 3});
  const std::vector<double> plane = {0,  1,  3, 3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                     27, 15, 9, 20, 33, 24, 13, 6,  13, 21, 15, 8};
  std::vector<double> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  expect_close_values(run(node, {x, w})[0], {1, 2, 5, 5}, both);
}

TEST(OnnxOpsLinearConv, ConvTransposeAgainstDirectLoops) {
  const std::vector<ConvTest> tests = {
      {"plain with bias", {{2, 3, 3, 4}, {3, 2, 3, 2}, {1, 1}, {1, 1}, {0, 0}, 1, true}, attrs({}), {2, 2, 5, 5}},
      {"stride 2, pads",
       {{1, 2, 3, 3}, {2, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
       attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}),
       {1, 3, 5, 5}},
      {"output_padding",
       {{1, 2, 3, 3}, {2, 1, 3, 3}, {2, 3}, {1, 1}, {1, 0}, 1, true},
       attrs({{"strides", {2, 3}}, {"pads", {1, 0, 1, 1}}, {"output_padding", {1, 2}}}),
       {1, 1, 6, 10}},
      {"dilation 2, groups 2",
       {{1, 4, 3, 2}, {4, 2, 2, 3}, {1, 1}, {2, 2}, {0, 0}, 2, true},
       attrs({{"dilations", {2, 2}}}),
       {1, 4, 5, 6}},
      // output_shape [10, 8] needs one more row and column than the full output of 9 x 7:
      // total padding -1, a zero row and column at the end.
      {"output_shape",
       {{1, 1, 3, 3}, {1, 2, 3, 3}, {3, 2}, {1, 1}, {0, 0}, 1, false},
       attrs({{"strides", {3, 2}}, {"output_shape", {10, 8}}}),
       {1, 2, 10, 8}},
      {"SAME_UPPER",
       {{1, 2, 3, 3}, {2, 2, 3, 3}, {2, 2}, {1, 1}, {0, 0}, 1, false},
       attrs({{"strides", {2, 2}}}, "SAME_UPPER"),
       {1, 2, 6, 6}},
      {"SAME_LOWER",
       {{1, 2, 3, 3}, {2, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
       attrs({{"strides", {2, 2}}}, "SAME_LOWER"),
       {1, 2, 6, 6}},
      {"1-D",
       {{2, 2, 4}, {2, 3, 3}, {2}, {1}, {1}, 1, true},
       attrs({{"strides", {2}}, {"pads", {1, 0}}, {"output_padding", {1}}}),
       {2, 3, 9}},
      {"3-D",
       {{1, 2, 2, 3, 2}, {2, 1, 2, 2, 2}, {2, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1, false},
       attrs({{"strides", {2, 1, 1}}}),
       {1, 1, 4, 4, 3}},
  };
  for (const ConvTest& t : tests) run_conv_test("ConvTranspose", t);
  set_im2col_chunk_elements(11);
  for (const ConvTest& t : tests) run_conv_test("ConvTranspose", t);
  set_im2col_chunk_elements(std::int64_t{1} << 22);
}

// ---- Against PyTorch 1.13 (F.conv2d, F.conv_transpose2d in float64), on inputs
// x[i] = sin(0.37 i + 0.1) of each tensor's shape.

// kTorchConvTranspose [1, 4, 6, 5]
const std::vector<double> kTorchConvTranspose = {
    0.41399795777559528,    0.95298314658453198,   1.6382033894971302,   0.88560691933439406,  1.3033247969189168,
    1.3376390881441129,     1.7777137664958336,    3.4428456249985335,   1.8696379787426882,   1.9477573816768992,
    1.6272232640515558,     1.671222955813858,     2.9608647905415455,   1.6156096389684313,   1.4679103150564412,
    1.9477573816768994,     1.6547117129021476,    2.8271560892937355,   1.3769504966315762,   0.80528024276677845,
    1.1440118479238024,     0.64415659846525131,   1.1058445441197955,   0.66207462207634005,  0.11300433370695678,
    0.9859730892089793,     0.60389593612527293,   0.77072599896973615,  0.47749475282697296,  0.18691168556915105,
    0.1942316119000238,     -0.084125195353533688, -0.60258443178660359, -0.28770561394743843, -0.61527746011182782,
    0.36124468292022061,    -0.10886951689427926,  -1.1251663364541717,  -0.67838591822007976, -1.0343321038324069,
    -0.39495573344260027,   -0.38536000911972634,  -1.5134762209133208,  -0.81193998399872203, -0.6544133116987414,
    -0.76766756828476179,   -0.86718619416641296,  -2.4299157453824165,  -1.1214281231477161,  -0.84078991922226765,
    -0.042464477235075737,  0.24442602868177088,   -0.24037446647925631, 0.068639049993008516, 0.53630299422176497,
    -0.54330978447065703,   -0.055141867971518543, -0.55587128030591781, -0.11016355864784821, 0.46064930844979018,
    -0.0059628201601527042, -0.33308240095896069,  -1.3678353423980387,  -0.51224248436165476, -0.74551606440553042,
    -0.4040062276912143,    -0.75540182619398755,  -2.4642761544212965,  -1.0792065922957046,  -1.0957040259137805,
    -0.52519433773630209,   -0.3641852443098571,   -1.5748481429946937,  -0.60272983629817178, -0.24599547428079371,
    -0.82903949036613478,   -0.54131504363970506,  -1.687304418937015,   -0.41293111263722915, 0.19392912347794511,
    0.36595336018287139,    0.83626203636610086,   0.79434457622095511,  0.80327891960068376,  1.3538045846216233,
    0.19133008513701699,    0.76235972242834082,   0.79907970037571308,  0.71904266622571711,  1.2288189141114882,
    1.0508530037937838,     1.0318484652303743,    1.4163826750068049,   1.4881785632115929,   1.5493910134858955,
    0.55157681594429109,    0.90558493461697476,   1.5324563228718857,   1.5968319452885149,   1.8997567073888231,
    0.95910054591068772,    0.91520325475841224,   1.4659846268148031,   1.4255597375938329,   1.2572759937006834,
    1.577331406236949,      1.8041520255556316,    3.0499939149017208,   2.0907924909005438,   1.9530477152030195,
    0.84126434554079954,    0.82123001197496248,   0.92651836278187871,  0.81877168946686596,  0.60790062958756197,
    1.2347833376267521,     0.83212769645823281,   0.89148141127312885,  0.85949036005864266,  0.34566526764431682};
// kTorchConv [1, 6, 2, 4]
const std::vector<double> kTorchConv = {
    0.092862336789596642, 0.14823458168371578,   -1.8132351537012299,  -1.9371606185374299,  1.1306508736765351,
    2.4362122516698732,   0.52118840326757532,   -0.4273322647487951,  0.021662442967750606, -0.45307079741513312,
    -1.8485217758849997,  -1.5967301308343376,   1.2202191582581992,   2.2184438113373779,   -0.018194161139824472,
    -0.77781067579880636, -0.050325378392612086, -0.98855088212130571, -1.6221773799227841,  -1.0299993145292494,
    1.1408214361586722,   1.691641312002079,     -0.55277208743202444, -1.0168972136944787,  2.0034767711268868,
    3.3220855593742309,   2.7544606173630672,    1.8906848225342745,   1.1832750317418859,   1.5360046316373464,
    3.2746613913777822,   3.1262030410043034,    2.0862252599020006,   3.4082892063289565,   2.0625448602359189,
    1.1625717792930952,   1.6236873638030005,    2.4289321203164826,   3.4948205195388122,   3.0290504627434975,
    1.8812121814153833,   3.0212230224768302,    1.0861903023697739,   0.27630160567709794,  1.8412401344100702,
    2.986010387008629,    3.2295679884290744,    2.5118417586419985};

TEST(OnnxOpsLinearConv, AgainstPyTorch) {
  // conv_transpose2d(stride (2, 1), padding (1, 0), output_padding (1, 0), groups 2, dilation (1, 2))
  NodeSpec transpose = make_node("ConvTranspose", 3);
  set_ints(transpose, "strides", {2, 1});
  set_ints(transpose, "pads", {1, 0, 1, 0});
  set_ints(transpose, "output_padding", {1, 0});
  set_ints(transpose, "dilations", {1, 2});
  set_int(transpose, "group", 2);
  expect_close_values(run(transpose, {sine_value({1, 4, 3, 3}), sine_value({4, 2, 3, 2}), sine_value({4})})[0], {1, 4, 6, 5},
                kTorchConvTranspose, 1e-13);
  // conv2d(stride 2, padding (1, 2), dilation (2, 1), groups 2)
  NodeSpec conv = make_node("Conv", 3);
  set_ints(conv, "strides", {2, 2});
  set_ints(conv, "pads", {1, 2, 1, 2});
  set_ints(conv, "dilations", {2, 1});
  set_int(conv, "group", 2);
  expect_close_values(run(conv, {sine_value({1, 4, 5, 6}), sine_value({6, 2, 3, 3}), sine_value({6})})[0], {1, 6, 2, 4},
                kTorchConv, 1e-13);
}

// Backward in f32 runs in its own precision and agrees with f64 (the kernels are one
// template; this holds the dispatch to it).
TEST(OnnxOpsLinearConv, BackwardInF32) {
  struct Case {
    NodeSpec node;
    std::vector<Shape> shapes;
  };
  NodeSpec strided = make_node("ConvTranspose", 3);
  set_ints(strided, "strides", {2, 2});
  set_int(strided, "group", 2);
  const std::vector<Case> cases = {{make_node("Gemm", 3), {{3, 4}, {4, 2}, {2}}},
                                   {make_node("MatMul", 2), {{2, 3, 4}, {2, 4, 5}}},
                                   {make_node("Conv", 3), {{2, 2, 5, 4}, {3, 2, 3, 2}, {3}}},
                                   {strided, {{1, 2, 3, 3}, {2, 2, 3, 3}, {4}}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.op_type);
    std::vector<Tensor> grads[2];
    for (int precision = 0; precision < 2; ++precision) {
      const DType dtype = precision == 0 ? DType::f32 : DType::f64;
      std::vector<Value> inputs;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) inputs.push_back(random_value(c.shapes[i], 31 + i, dtype));
      auto op = builtin_ops().create(c.node);
      const auto y = op->forward(inputs);
      grads[precision] = op->backward({random_value(y[0].shape(), 41, dtype).tensor});
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      ASSERT_EQ(grads[0][i].dtype(), DType::f32);
      const auto g32 = grads[0][i].to_vector<float>();
      const auto g64 = grads[1][i].to_vector<double>();
      for (std::size_t e = 0; e < g32.size(); ++e) EXPECT_NEAR(g32[e], g64[e], 1e-5) << "input " << i;
    }
  }
}

TEST(OnnxOpsLinearConv, OneOpAtSeveralShapes) {
  // An op keeps its window table between forwards; a new input shape must rebuild it.
  NodeSpec node = make_node("Conv", 2);
  set_ints(node, "pads", {1, 1, 1, 1});
  auto op = builtin_ops().create(node);
  const Value w = random_value({2, 1, 3, 3}, 2);
  for (const Shape& x_shape : {Shape{1, 1, 4, 5}, Shape{1, 1, 4, 5}, Shape{2, 1, 6, 3}}) {
    const Value x = random_value(x_shape, 1);
    const auto y = op->forward({x, w});
    expect_close_values(y[0], {x_shape[0], 2, x_shape[2], x_shape[3]}, run(node, {x, w})[0].tensor.to_vector<double>());
  }
}

TEST(OnnxOpsLinearConv, ConvRefusals) {
  NodeSpec node = make_node("Conv", 2);
  set_string(node, "auto_pad", "SAME_SIDEWAYS");
  try {
    run(node, {random_value({1, 1, 4, 4}, 1), random_value({1, 1, 3, 3}, 2)});
    FAIL() << "an unknown auto_pad ran";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("auto_pad 'SAME_SIDEWAYS' is not supported"), std::string::npos) << e.what();
  }
  const NodeSpec plain = make_node("Conv", 2);
  EXPECT_THROW(run(plain, {random_value({1, 2, 4, 4}, 1), random_value({1, 3, 3, 3}, 2)}), InvalidArgument);
  EXPECT_THROW(run(make_node("Conv", 1), {random_value({1, 2, 4, 4}, 1)}), InvalidArgument);
  try {
    run(plain, {Value::integers(std::vector<std::int64_t>(16, 1), {1, 1, 4, 4}), random_value({1, 1, 3, 3}, 2)});
    FAIL() << "an integer Conv ran";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("X of type int64 is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::onnx::test
