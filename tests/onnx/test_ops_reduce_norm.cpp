// The ONNX reduce_norm ops (src/onnx/ops_reduce_norm.cpp) against hand values and finite differences.
#include <cmath>

#include "../support/expect_error.hpp"
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

using tessera::testing::expect_error;

Value typed_value(const std::vector<double>& v, const Shape& shape, DType dtype) {
  if (dtype == DType::f32) return Value::floating(Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape));
  return f64_value(v, shape);
}

std::vector<double> doubles(const Value& v) {
  if (v.type == ElementType::f32) {
    const auto f = v.tensor.to_vector<float>();
    return {f.begin(), f.end()};
  }
  return v.tensor.to_vector<double>();
}

void expect_values(const Value& v, const Shape& shape, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(v.shape(), shape);
  const auto got = doubles(v);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tolerance) << "element " << i;
}

constexpr DType kBoth[] = {DType::f32, DType::f64};
double tolerance_of(DType dtype) { return dtype == DType::f32 ? 2e-6 : 1e-13; }

// A Reduce* node with axes as an attribute (opset 11) or, when `as_input`, as an input (18).
NodeSpec reduce_node(const std::string& op, const std::vector<std::int64_t>& axes, int keepdims, bool as_input = false) {
  NodeSpec node = make_node(op, as_input ? 2 : 1, 1, as_input ? 18 : 11);
  if (!as_input && !axes.empty()) set_ints(node, "axes", axes);
  set_int(node, "keepdims", keepdims);
  return node;
}

// ---------------------------------------------------------------------------------------
// Reduce*.

TEST(OnnxOps_reduce_norm, ReductionsByHand) {
  const std::vector<double> x = {1, -2, 3, 4, 5, -6};  // [2, 3]
  const double l1 = std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0));
  const double l2 = std::log(std::exp(4.0) + std::exp(5.0) + std::exp(-6.0));
  struct Case {
    const char* op;
    std::vector<double> rows;  // reduced over axis 1
  };
  const std::vector<Case> cases = {
      {"ReduceSum", {2, 3}},
      {"ReduceMean", {2.0 / 3, 1}},
      {"ReduceMax", {3, 5}},
      {"ReduceMin", {-2, -6}},
      {"ReduceProd", {-6, -120}},
      {"ReduceSumSquare", {14, 77}},
      {"ReduceL1", {6, 15}},
      {"ReduceL2", {std::sqrt(14.0), std::sqrt(77.0)}},
      {"ReduceLogSumExp", {l1, l2}},
  };
  for (DType dtype : kBoth) {
    const Value v = typed_value(x, {2, 3}, dtype);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.op);
      const double tol = tolerance_of(dtype) * 100;
      expect_values(run(reduce_node(c.op, {1}, 1), {v})[0], {2, 1}, c.rows, tol);
      expect_values(run(reduce_node(c.op, {-1}, 0), {v})[0], {2}, c.rows, tol);
      // Axes as an input (opset 18; ReduceSum from 13).
      expect_values(run(reduce_node(c.op, {}, 0, true), {v, Value::integers({1}, {1})})[0], {2}, c.rows, tol);
    }
    expect_values(run(make_node("ReduceLogSum", 1, 1, 13), {typed_value({1, 2, 3, 4, 5, 6}, {2, 3}, dtype)})[0],
                  {1, 1}, {std::log(21.0)}, tolerance_of(dtype) * 10);
    // Over axis 0, and over everything by default.
    expect_values(run(reduce_node("ReduceSum", {0}, 0), {v})[0], {3}, {5, 3, -3}, 0.0);
    const auto with_nan = run(reduce_node("ReduceMax", {1}, 0), {typed_value({1, std::nan(""), 3, 4, 5, 6}, {2, 3}, dtype)});
    EXPECT_TRUE(std::isnan(doubles(with_nan[0])[0])) << "a NaN propagates";
    EXPECT_EQ(doubles(with_nan[0])[1], 6);
    expect_values(run(reduce_node("ReduceMax", {}, 1), {v})[0], {1, 1}, {5}, 0.0);
    expect_values(run(reduce_node("ReduceMean", {0, 1}, 0), {v})[0], {}, {5.0 / 6}, tolerance_of(dtype));
  }
}

TEST(OnnxOps_reduce_norm, ReduceSumAxesInputAndNoop) {
  const Value x = f64_value({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  NodeSpec sum = make_node("ReduceSum", 2, 1, 13);
  expect_values(run(sum, {x, Value::integers({0, 2}, {2})})[0], {1, 2, 1}, {6, 15}, 0.0);
  expect_values(run(sum, {x, Value::integers({}, {0})})[0], {1, 1, 1}, {21}, 0.0);  // empty: all
  expect_values(run(sum, {x, Value()})[0], {1, 1, 1}, {21}, 0.0);                   // omitted: all
  set_int(sum, "noop_with_empty_axes", 1);
  expect_values(run(sum, {x, Value::integers({}, {0})})[0], {1, 2, 3}, {1, 2, 3, 4, 5, 6}, 0.0);
  // Before 13 ReduceSum's axes are an attribute.
  NodeSpec old = make_node("ReduceSum", 1, 1, 11);
  set_ints(old, "axes", {-2});
  set_int(old, "keepdims", 0);
  expect_values(run(old, {x})[0], {1, 3}, {5, 7, 9}, 0.0);
}

TEST(OnnxOps_reduce_norm, ReductionRefusals) {
  const Value x = f64_value({1, 2, 3, 4}, {2, 2});
  NodeSpec l2 = make_node("ReduceL2", 2, 1, 18);
  set_int(l2, "noop_with_empty_axes", 1);
  expect_error<UnsupportedError>([&] { run(l2, {x, Value::integers({}, {0})}); },
                                 {"node 'test_ReduceL2' (ReduceL2, opset 18)", "noop_with_empty_axes", "not supported"});
  expect_error<InvalidArgument>([&] { run(reduce_node("ReduceMean", {1, -1}, 1), {x}); },
                                {"node 'test_ReduceMean'", "axis -1 appears twice"});
  expect_error<InvalidArgument>([&] { run(reduce_node("ReduceMax", {2}, 1), {x}); },
                                {"node 'test_ReduceMax'", "axis 2", "rank 2"});
  NodeSpec both = make_node("ReduceSum", 2, 1, 13);
  set_ints(both, "axes", {0});
  expect_error<InvalidArgument>([&] { builtin_ops().create(both); }, {"node 'test_ReduceSum'", "axes"});
  expect_error<UnsupportedError>([&] { run(reduce_node("ReduceSum", {0}, 1), {Value::integers({1, 2}, {2})}); },
                                 {"node 'test_ReduceSum'", "int64"});
}

TEST(OnnxOps_reduce_norm, ReductionGradients) {
  const Value x = random_value({2, 3, 2}, 11);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceLogSumExp"}) {
    SCOPED_TRACE(op);
    check_gradients(reduce_node(op, {0, 2}, 1), {x});
    check_gradients(reduce_node(op, {1}, 0), {x});
    check_gradients(reduce_node(op, {}, 0), {x});
  }
  check_gradients(make_node("ReduceLogSum", 1, 1, 13), {f64_value({0.5, 1.5, 2.0}, {3})});
  // ReduceProd with zeros: one zero gets the product of the rest, two zeros give none.
  check_gradients(reduce_node("ReduceProd", {1}, 1), {f64_value({0, 2, 3, 0, 0, 5}, {2, 3})});
  // Ties split the gradient evenly (PyTorch's amax).
  auto op = builtin_ops().create(reduce_node("ReduceMax", {1}, 0));
  op->forward({f64_value({1, 3, 3, 2}, {1, 4})});
  EXPECT_EQ(op->backward({f64_value({1}, {1}).tensor})[0].to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

// ---------------------------------------------------------------------------------------
// Softmax, LogSoftmax, LpNormalization.

TEST(OnnxOps_reduce_norm, SoftmaxAlongAnAxis) {
  // [2, 2, 2] along axis 1 (opset 13): pairs (x[i][0][k], x[i][1][k]).
  const std::vector<double> x = {0, 1, 2, 4, -1, 0, 1, 1};
  auto pair = [](double a, double b) { return 1 / (1 + std::exp(b - a)); };
  const std::vector<double> expected = {pair(0, 2), pair(1, 4), pair(2, 0), pair(4, 1),
                                        pair(-1, 1), pair(0, 1), pair(1, -1), pair(1, 0)};
  for (DType dtype : kBoth) {
    NodeSpec softmax = make_node("Softmax", 1, 1, 13);
    set_int(softmax, "axis", 1);
    expect_values(run(softmax, {typed_value(x, {2, 2, 2}, dtype)})[0], {2, 2, 2}, expected, tolerance_of(dtype));
    NodeSpec log_softmax = make_node("LogSoftmax", 1, 1, 13);
    set_int(log_softmax, "axis", -2);
    std::vector<double> logs;
    for (double e : expected) logs.push_back(std::log(e));
    expect_values(run(log_softmax, {typed_value(x, {2, 2, 2}, dtype)})[0], {2, 2, 2}, logs, tolerance_of(dtype) * 10);
    // Large values do not overflow.
    expect_values(run(make_node("Softmax", 1, 1, 13), {typed_value({1000, 1001}, {2}, dtype)})[0], {2},
                  {pair(1000, 1001), pair(1001, 1000)}, tolerance_of(dtype));
  }
}

TEST(OnnxOps_reduce_norm, SoftmaxBeforeOpset13CoercesTo2D) {
  // Default axis 1 of [2, 2, 2]: each batch row of 4 is one softmax.
  const std::vector<double> x = {0, 1, 2, 3, 3, 3, 3, 3};
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const std::vector<double> expected = {1 / z, std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z,
                                        0.25, 0.25, 0.25, 0.25};
  expect_values(run(make_node("Softmax", 1, 1, 11), {f64_value(x, {2, 2, 2})})[0], {2, 2, 2}, expected, 1e-15);
  NodeSpec axis2 = make_node("LogSoftmax", 1, 1, 11);
  set_int(axis2, "axis", 2);
  const double p = std::log(1 / (1 + std::exp(1.0)));
  expect_values(run(axis2, {f64_value(x, {2, 2, 2})})[0], {2, 2, 2},
                {p, p + 1, p, p + 1, std::log(0.5), std::log(0.5), std::log(0.5), std::log(0.5)}, 1e-15);
}

TEST(OnnxOps_reduce_norm, AxisOpGradients) {
  const Value x = random_value({2, 3, 4}, 12);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int opset : {11, 13}) {
      for (std::int64_t axis : {0, 1, -1}) {
        NodeSpec node = make_node(op, 1, 1, opset);
        set_int(node, "axis", axis);
        check_gradients(node, {x});
      }
    }
  }
  for (std::int64_t p : {1, 2}) {
    NodeSpec lp = make_node("LpNormalization", 1);
    set_int(lp, "p", p);
    set_int(lp, "axis", 1);
    check_gradients(lp, {x});
  }
}

TEST(OnnxOps_reduce_norm, LpNormalization) {
  NodeSpec l2 = make_node("LpNormalization", 1);
  expect_values(run(l2, {f64_value({3, 4, 0, -2}, {2, 2})})[0], {2, 2}, {0.6, 0.8, 0, -1}, 1e-15);
  NodeSpec l1 = make_node("LpNormalization", 1);
  set_int(l1, "p", 1);
  set_int(l1, "axis", 0);
  expect_values(run(l1, {f64_value({3, 4, -1, 4}, {2, 2})})[0], {2, 2}, {0.75, 0.5, -0.25, 0.5}, 1e-15);
  set_int(l1, "p", 3);
  expect_error<UnsupportedError>([&] { builtin_ops().create(l1); }, {"node 'test_LpNormalization'", "p=3"});
}

// ---------------------------------------------------------------------------------------
// LayerNormalization, InstanceNormalization, BatchNormalization.

TEST(OnnxOps_reduce_norm, LayerNormalizationByHand) {
  // Rows [1, 2, 3] and [2, 4, 6]: mean 2 / 4, variance 2/3 and 8/3.
  const double eps = 1e-5;
  const double r1 = 1 / std::sqrt(2.0 / 3 + eps), r2 = 1 / std::sqrt(8.0 / 3 + eps);
  for (DType dtype : kBoth) {
    NodeSpec node = make_node("LayerNormalization", 3, 3);
    const auto out = run(node, {typed_value({1, 2, 3, 2, 4, 6}, {2, 3}, dtype), typed_value({1, 2, 3}, {3}, dtype),
                                typed_value({0.5, 0, -0.5}, {3}, dtype)});
    const double tol = tolerance_of(dtype) * 10;
    expect_values(out[0], {2, 3}, {-r1 + 0.5, 0, 3 * r1 - 0.5, -2 * r2 + 0.5, 0, 6 * r2 - 0.5}, tol);
    expect_values(out[1], {2, 1}, {2, 4}, tol);
    expect_values(out[2], {2, 1}, {r1, r2}, tol);
  }
  // axis 0 normalises everything; no scale or bias given.
  NodeSpec all = make_node("LayerNormalization", 1);
  set_int(all, "axis", 0);
  set_float(all, "epsilon", 0.0);
  const double r = 1 / std::sqrt(1.25);
  expect_values(run(all, {f64_value({1, 2, 3, 4}, {2, 2})})[0], {2, 2}, {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r}, 1e-15);
}

TEST(OnnxOps_reduce_norm, LayerNormalizationGradients) {
  const Value x = random_value({2, 3, 4}, 13);
  for (std::int64_t axis : {-1, 1, 0}) {
    NodeSpec node = make_node("LayerNormalization", 3, 3);
    set_int(node, "axis", axis);
    const Shape norm = axis == -1 ? Shape{4} : axis == 1 ? Shape{3, 4} : Shape{2, 3, 4};
    check_gradients(node, {x, random_value(norm, 14), random_value(norm, 15)});
  }
  // A scale that broadcasts over the normalised shape, and Y alone.
  NodeSpec broadcast = make_node("LayerNormalization", 3, 1);
  set_int(broadcast, "axis", 1);
  check_gradients(broadcast, {x, random_value({1, 4}, 16), random_value({3, 1}, 17)});
  NodeSpec no_bias = make_node("LayerNormalization", 2, 1);
  check_gradients(no_bias, {x, random_value({4}, 18)});
}

TEST(OnnxOps_reduce_norm, LayerNormalizationRefusals) {
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("LayerNormalization", 3, 1, 16)); },
                                 {"node 'test_LayerNormalization' (LayerNormalization, opset 16)", "before opset 17"});
  NodeSpec stash = make_node("LayerNormalization", 3, 1);
  set_int(stash, "stash_type", 11);
  expect_error<UnsupportedError>([&] { builtin_ops().create(stash); },
                                 {"node 'test_LayerNormalization'", "stash_type=11", "not supported"});
  expect_error<InvalidArgument>(
      [] { run(make_node("LayerNormalization", 2, 1), {random_value({2, 3}, 1), random_value({2}, 2)}); },
      {"node 'test_LayerNormalization'", "[2] and [3] do not broadcast"});
}

TEST(OnnxOps_reduce_norm, InstanceNormalization) {
  // [1, 2, 3]: channel 0 = [1, 2, 3] (mean 2, var 2/3), channel 1 = [5, 7, 9] (mean 7, var 8/3).
  const double r0 = 1 / std::sqrt(2.0 / 3), r1 = 1 / std::sqrt(8.0 / 3);
  for (DType dtype : kBoth) {
    NodeSpec node = make_node("InstanceNormalization", 3);
    set_float(node, "epsilon", 0.0);
    const auto out = run(node, {typed_value({1, 2, 3, 5, 7, 9}, {1, 2, 3}, dtype), typed_value({2, 1}, {2}, dtype),
                                typed_value({0, 7}, {2}, dtype)});
    expect_values(out[0], {1, 2, 3}, {-2 * r0, 0, 2 * r0, 7 - 2 * r1, 7, 7 + 2 * r1}, tolerance_of(dtype) * 10);
  }
  NodeSpec node = make_node("InstanceNormalization", 3);
  const auto out = run(node, {f64_value({1, 2, 3, 5, 5, 5}, {1, 2, 3}), f64_value({2, 1}, {2}), f64_value({0, 7}, {2})});
  EXPECT_NEAR(out[0].tensor.to_vector<double>()[4], 7.0, 1e-12);  // a constant plane gives the bias
  check_gradients(node, {random_value({2, 3, 2, 2}, 21), random_value({3}, 22), random_value({3}, 23)});
  expect_error<InvalidArgument>(
      [] { run(make_node("InstanceNormalization", 3), {random_value({1, 2, 3}, 1), random_value({3}, 2), random_value({2}, 3)}); },
      {"node 'test_InstanceNormalization'", "one value per channel"});
}

TEST(OnnxOps_reduce_norm, BatchNormalizationInference) {
  // [N=2, C=2, 2]: y = scale[c] (x - mean[c]) / sqrt(var[c] + eps) + B[c].
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8};
  for (DType dtype : kBoth) {
    NodeSpec node = make_node("BatchNormalization", 5, 1, 15);
    set_float(node, "epsilon", 0.0);
    const auto out = run(node, {typed_value(x, {2, 2, 2}, dtype), typed_value({2, 1}, {2}, dtype),
                                typed_value({1, -1}, {2}, dtype), typed_value({1, 4}, {2}, dtype),
                                typed_value({4, 0.25}, {2}, dtype)});
    expect_values(out[0], {2, 2, 2}, {1, 2, -3, -1, 5, 6, 5, 7}, tolerance_of(dtype) * 10);
  }
  NodeSpec node = make_node("BatchNormalization", 5, 1, 15);
  auto op = builtin_ops().create(node);
  EXPECT_TRUE(op->differentiable_input(2));
  EXPECT_FALSE(op->differentiable_input(3));
  EXPECT_FALSE(op->differentiable_input(4));
  const Value var = f64_value({0.5, 1.5, 2.5}, {3});
  check_gradients(node, {random_value({2, 3, 2}, 31), random_value({3}, 32), random_value({3}, 33),
                         random_value({3}, 34), var});
  check_gradients(make_node("BatchNormalization", 5, 1, 9),
                  {random_value({4, 3}, 35), random_value({3}, 36), random_value({3}, 37), random_value({3}, 38), var});
}

TEST(OnnxOps_reduce_norm, BatchNormalizationRefusals) {
  NodeSpec training = make_node("BatchNormalization", 5, 1, 15);
  set_int(training, "training_mode", 1);
  expect_error<UnsupportedError>([&] { builtin_ops().create(training); },
                                 {"node 'test_BatchNormalization' (BatchNormalization, opset 15)", "training_mode=1"});
  NodeSpec spatial = make_node("BatchNormalization", 5, 1, 7);
  set_int(spatial, "spatial", 0);
  expect_error<UnsupportedError>([&] { builtin_ops().create(spatial); }, {"opset 7", "spatial=0"});
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("BatchNormalization", 5, 3, 9)); },
                                 {"node 'test_BatchNormalization'", "training outputs"});
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("BatchNormalization", 3, 1, 15)); },
                                {"node 'test_BatchNormalization'", "5 inputs"});
}

}  // namespace
}  // namespace tessera::onnx::test
