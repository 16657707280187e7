// The ONNX elementwise ops (src/onnx/ops_elementwise.cpp) against hand values and finite differences.
#include <cmath>
#include <limits>

#include "../support/expect_error.hpp"
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

using tessera::testing::expect_error;

Value f32_value(const std::vector<double>& v, const Shape& shape) {
  return Value::floating(Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape));
}

Value typed_value(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return dtype == DType::f32 ? f32_value(v, shape) : f64_value(v, shape);
}

// The elements of a floating value as doubles.
std::vector<double> doubles(const Value& v) {
  if (v.type == ElementType::f32) {
    const auto f = v.tensor.to_vector<float>();
    return {f.begin(), f.end()};
  }
  return v.tensor.to_vector<double>();
}

void expect_values(const Value& v, ElementType type, const Shape& shape, const std::vector<double>& expected,
                   double tolerance) {
  ASSERT_EQ(v.type, type);
  ASSERT_EQ(v.shape(), shape);
  const auto got = doubles(v);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tolerance) << "element " << i;
}

void expect_ints(const Value& v, ElementType type, const Shape& shape, const std::vector<std::int64_t>& expected) {
  ASSERT_EQ(v.type, type);
  ASSERT_EQ(v.shape(), shape);
  EXPECT_EQ(v.tensor.to_vector<std::int64_t>(), expected);
}

constexpr DType kBoth[] = {DType::f32, DType::f64};
double tolerance_of(DType dtype) { return dtype == DType::f32 ? 1e-6 : 1e-14; }
ElementType type_of(DType dtype) { return dtype == DType::f32 ? ElementType::f32 : ElementType::f64; }

// ---------------------------------------------------------------------------------------
// Binary arithmetic and broadcasting.

TEST(OnnxOps_elementwise, AddBroadcastsRank3AgainstColumn) {
  // [2,3,4] + [3,1]: b[j] is added to every a[i][j][k].
  std::vector<double> a(24), b = {10, 20, 30}, expected(24);
  for (int i = 0; i < 24; ++i) a[i] = i;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) expected[(i * 3 + j) * 4 + k] = (i * 3 + j) * 4 + k + b[j];
    }
  }
  for (DType dtype : kBoth) {
    const auto out = run(make_node("Add", 2), {typed_value(a, {2, 3, 4}, dtype), typed_value(b, {3, 1}, dtype)});
    expect_values(out.at(0), type_of(dtype), {2, 3, 4}, expected, 0.0);
  }
}

TEST(OnnxOps_elementwise, SubMulDivPowByHand) {
  for (DType dtype : kBoth) {
    const Value a = typed_value({1, 4, 9, 16, -2, 0.5}, {2, 3}, dtype);
    const Value b = typed_value({2, 0.5, 3}, {3}, dtype);
    const double tol = tolerance_of(dtype);
    expect_values(run(make_node("Sub", 2), {a, b})[0], type_of(dtype), {2, 3}, {-1, 3.5, 6, 14, -2.5, -2.5}, tol);
    expect_values(run(make_node("Mul", 2), {a, b})[0], type_of(dtype), {2, 3}, {2, 2, 27, 32, -1, 1.5}, tol);
    expect_values(run(make_node("Div", 2), {a, b})[0], type_of(dtype), {2, 3}, {0.5, 8, 3, 8, -4, 0.5 / 3}, tol);
    const Value e = typed_value({2, 3}, {2, 1}, dtype);
    const Value base = typed_value({4, 9, -2}, {3}, dtype);
    expect_values(run(make_node("Pow", 2), {base, e})[0], type_of(dtype), {2, 3}, {16, 81, 4, 64, 729, -8}, tol * 100);
  }
}

TEST(OnnxOps_elementwise, ScalarOperandsBroadcast) {
  for (DType dtype : kBoth) {
    const Value scalar = typed_value({3}, {}, dtype);
    const Value m = typed_value({1, 2, 3, 4}, {2, 2}, dtype);
    expect_values(run(make_node("Mul", 2), {scalar, m})[0], type_of(dtype), {2, 2}, {3, 6, 9, 12}, 0.0);
    expect_values(run(make_node("Sub", 2), {scalar, m})[0], type_of(dtype), {2, 2}, {2, 1, 0, -1}, 0.0);
    expect_values(run(make_node("Div", 2), {scalar, scalar})[0], type_of(dtype), {}, {1}, 0.0);
  }
}

TEST(OnnxOps_elementwise, PowWithIntegerExponentKeepsTheBaseType) {
  const auto out = run(make_node("Pow", 2), {f32_value({2, 3, -1.5}, {3}), Value::integers({3}, {1})});
  expect_values(out[0], ElementType::f32, {3}, {8, 27, -3.375}, 1e-6);
  const auto squared = run(make_node("Pow", 2), {f64_value({-2, 0.5}, {2}), f32_value({2}, {})});
  expect_values(squared[0], ElementType::f64, {2}, {4, 0.25}, 0.0);
}

TEST(OnnxOps_elementwise, PowGradientsKeepEachInputsType) {
  // An f32 exponent of an f64 base: computed in f64, its gradient handed back in f32.
  auto op = builtin_ops().create(make_node("Pow", 2));
  op->forward({f64_value({2, 4}, {2}), f32_value({3}, {})});
  auto grads = op->backward({f64_value({1, 1}, {2}).tensor});
  EXPECT_EQ(grads[0].to_vector<double>(), (std::vector<double>{12, 48}));
  ASSERT_EQ(grads[1].dtype(), DType::f32);
  EXPECT_NEAR(grads[1].to_vector<float>()[0], 8 * std::log(2.0) + 64 * std::log(4.0), 1e-4);
  // An integer exponent has no gradient.
  op->forward({f64_value({2, 4}, {2}), Value::integers({3}, {})});
  EXPECT_FALSE(op->differentiable_input(1));
  grads = op->backward({f64_value({1, 1}, {2}).tensor});
  EXPECT_EQ(grads[0].to_vector<double>(), (std::vector<double>{12, 48}));
  EXPECT_FALSE(grads[1].defined());
}

TEST(OnnxOps_elementwise, IntegerArithmeticFollowsOnnx) {
  const Value a = Value::integers({7, -7, 7, -7, 0}, {5});
  const Value b = Value::integers({2, 2, -2, -2, 5}, {5});
  expect_ints(run(make_node("Div", 2), {a, b})[0], ElementType::i64, {5}, {3, -3, -3, 3, 0});  // toward zero
  expect_ints(run(make_node("Add", 2), {a, b})[0], ElementType::i64, {5}, {9, -5, 5, -9, 5});
  expect_ints(run(make_node("Sub", 2), {a, b})[0], ElementType::i64, {5}, {5, -9, 9, -5, -5});
  expect_ints(run(make_node("Mul", 2), {a, Value::integers({-1}, {})})[0], ElementType::i64, {5}, {-7, 7, -7, 7, 0});
  expect_ints(run(make_node("Pow", 2), {Value::integers({2, -3}, {2}), Value::integers({10, 3}, {2})})[0],
              ElementType::i64, {2}, {1024, -27});
  // A shape computation: [N, C*H] from Shape's int64 output.
  expect_ints(run(make_node("Mul", 2), {Value::integers({4, 8}, {2}), Value::integers({1, 16}, {2})})[0],
              ElementType::i64, {2}, {4, 128});
  // Narrow types wrap to their width.
  const Value big = Value::integers({2147483647}, {1}, ElementType::i32);
  expect_ints(run(make_node("Add", 2), {big, Value::integers({1}, {1}, ElementType::i32)})[0], ElementType::i32, {1},
              {-2147483648LL});
  expect_ints(run(make_node("Mul", 2), {Value::integers({200}, {1}, ElementType::u8),
                                        Value::integers({2}, {1}, ElementType::u8)})[0],
              ElementType::u8, {1}, {144});
}

TEST(OnnxOps_elementwise, IntegerDivisionByZeroAndMixedTypesAreErrors) {
  expect_error<InvalidArgument>(
      [] { run(make_node("Div", 2), {Value::integers({1}, {1}), Value::integers({0}, {1})}); },
      {"node 'test_Div' (Div, opset 17)", "division by zero"});
  expect_error<InvalidArgument>([] { run(make_node("Add", 2), {f32_value({1}, {1}), f64_value({1}, {1})}); },
                                {"node 'test_Add'", "float", "double"});
  expect_error<InvalidArgument>(
      [] { run(make_node("Add", 2), {f32_value({1, 2}, {2}), f32_value({1, 2, 3}, {3})}); },
      {"node 'test_Add'", "[2]", "[3]"});
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("Mul", 3)); }, {"node 'test_Mul'", "2 inputs"});
}

TEST(OnnxOps_elementwise, BinaryGradientsThroughBroadcasting) {
  const Value a = random_value({2, 3, 4}, 1);
  const Value b = random_value({3, 1}, 2);
  for (const char* op : {"Add", "Sub", "Mul", "PRelu"}) {
    check_gradients(make_node(op, 2), {a, b});
    check_gradients(make_node(op, 2), {b, a});
  }
  // Div away from zero, Pow on positive bases.
  const Value positive = f64_value({0.5, 1.5, 2.0, 0.8, 1.2, 3.0}, {2, 3});
  check_gradients(make_node("Div", 2), {a, f64_value({1.5, -2.0, 0.7}, {3, 1})});
  check_gradients(make_node("Div", 2), {f64_value({1.5, -2.0, 0.7}, {3}), positive});
  check_gradients(make_node("Pow", 2), {positive, f64_value({2.0, -0.5, 1.3}, {3})});
  check_gradients(make_node("Pow", 2), {positive, f64_value({2.5}, {})});
}

TEST(OnnxOps_elementwise, PRelu) {
  const auto out = run(make_node("PRelu", 2), {f32_value({-2, 3, -4, 5}, {2, 2}), f32_value({0.5, 0.25}, {2})});
  expect_values(out[0], ElementType::f32, {2, 2}, {-1, 3, -2, 5}, 0.0);
}

// ---------------------------------------------------------------------------------------
// Unary functions.

struct UnaryCase {
  const char* op;
  double (*reference)(double);
  std::vector<double> x;  // where the function and its derivative are smooth
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(OnnxOps_elementwise, UnaryFunctionsForwardAndBackward) {
  const std::vector<double> mixed = {-2.4, -0.7, -0.1, 0.3, 0.9, 2.9};  // off every kink
  const std::vector<double> positive = {0.1, 0.5, 1.0, 2.0, 7.5, 100.0};
  const std::vector<UnaryCase> cases = {
      {"Sqrt", [](double x) { return std::sqrt(x); }, positive},
      {"Reciprocal", [](double x) { return 1 / x; }, positive},
      {"Log", [](double x) { return std::log(x); }, positive},
      {"Erf", [](double x) { return std::erf(x); }, mixed},
      {"Exp", [](double x) { return std::exp(x); }, mixed},
      {"Neg", [](double x) { return -x; }, mixed},
      {"Abs", [](double x) { return std::abs(x); }, mixed},
      {"Relu", [](double x) { return x > 0 ? x : 0.0; }, mixed},
      {"Sigmoid", sigmoid, mixed},
      {"Tanh", [](double x) { return std::tanh(x); }, mixed},
      {"Softplus", [](double x) { return std::log(1 + std::exp(x)); }, mixed},
      {"Softsign", [](double x) { return x / (1 + std::abs(x)); }, mixed},
      {"LeakyRelu", [](double x) { return x > 0 ? x : 0.01 * x; }, mixed},
      {"Elu", [](double x) { return x > 0 ? x : std::exp(x) - 1; }, mixed},
      {"Selu",
       [](double x) {
         return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * (std::exp(x) - 1));
       },
       mixed},
      {"HardSigmoid", [](double x) { return std::max(0.0, std::min(1.0, 0.2 * x + 0.5)); }, mixed},
      {"HardSwish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }, mixed},
      {"Gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, mixed},
      {"Celu", [](double x) { return x > 0 ? x : std::exp(x) - 1; }, mixed},
      {"ThresholdedRelu", [](double x) { return x > 1 ? x : 0.0; }, mixed},
      {"Shrink", [](double x) { return std::abs(x) > 0.5 ? x : 0.0; }, mixed},
      {"Mish", [](double x) { return x * std::tanh(std::log(1 + std::exp(x))); }, mixed},
      {"Sign", [](double x) { return x > 0 ? 1.0 : -1.0; }, mixed},
      {"Floor", [](double x) { return std::floor(x); }, mixed},
      {"Ceil", [](double x) { return std::ceil(x); }, mixed},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.op);
    std::vector<double> expected;
    for (double x : c.x) expected.push_back(c.reference(x));
    for (DType dtype : kBoth) {
      const auto out = run(make_node(c.op, 1), {typed_value(c.x, {2, 3}, dtype)});
      expect_values(out[0], type_of(dtype), {2, 3}, expected, dtype == DType::f32 ? 3e-5 : 1e-13);
    }
    check_gradients(make_node(c.op, 1), {f64_value(c.x, {2, 3})});
  }
}

TEST(OnnxOps_elementwise, ActivationAttributes) {
  NodeSpec leaky = make_node("LeakyRelu", 1);
  set_float(leaky, "alpha", 0.1);
  expect_values(run(leaky, {f64_value({-2, 3}, {2})})[0], ElementType::f64, {2}, {-0.2, 3}, 1e-15);
  NodeSpec elu = make_node("Elu", 1);
  set_float(elu, "alpha", 2.0);
  expect_values(run(elu, {f64_value({-1, 1}, {2})})[0], ElementType::f64, {2}, {2 * (std::exp(-1.0) - 1), 1}, 1e-15);
  NodeSpec hard = make_node("HardSigmoid", 1);
  set_float(hard, "alpha", 0.5);
  set_float(hard, "beta", 0.25);
  expect_values(run(hard, {f64_value({-1, 0.5, 4}, {3})})[0], ElementType::f64, {3}, {0, 0.5, 1}, 1e-15);
  check_gradients(hard, {f64_value({-0.9, 0.2, 0.7}, {3})});
  NodeSpec selu = make_node("Selu", 1);
  set_float(selu, "alpha", 2.0);
  set_float(selu, "gamma", 3.0);
  expect_values(run(selu, {f64_value({-1, 1}, {2})})[0], ElementType::f64, {2}, {6 * (std::exp(-1.0) - 1), 3}, 1e-15);
  check_gradients(selu, {f64_value({-0.9, 0.2, 0.7}, {3})});
  NodeSpec shrink = make_node("Shrink", 1);
  set_float(shrink, "lambd", 1.0);
  set_float(shrink, "bias", 0.25);
  expect_values(run(shrink, {f64_value({-2, -0.5, 0.5, 3}, {4})})[0], ElementType::f64, {4}, {-1.75, 0, 0, 2.75}, 0.0);
  NodeSpec celu = make_node("Celu", 1);
  set_float(celu, "alpha", 2.0);
  expect_values(run(celu, {f64_value({-1, 1}, {2})})[0], ElementType::f64, {2}, {2 * (std::exp(-0.5) - 1), 1}, 1e-15);
  check_gradients(celu, {f64_value({-0.9, 0.2, 0.7}, {3})});
  NodeSpec gelu = make_node("Gelu", 1, 1, 20);
  set_string(gelu, "approximate", "tanh");
  const double x = 0.7;
  const double tanh_form = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  expect_values(run(gelu, {f64_value({x}, {1})})[0], ElementType::f64, {1}, {tanh_form}, 1e-15);
  check_gradients(gelu, {f64_value({-2.0, -0.3, 0.4, 1.7}, {4})});
  set_string(gelu, "approximate", "sigmoid");
  expect_error<UnsupportedError>([&] { builtin_ops().create(gelu); },
                                 {"node 'test_Gelu' (Gelu, opset 20)", "approximate='sigmoid'", "not supported"});
}

TEST(OnnxOps_elementwise, IntegerUnaryAndRounding) {
  expect_ints(run(make_node("Neg", 1), {Value::integers({3, -4, 0}, {3})})[0], ElementType::i64, {3}, {-3, 4, 0});
  expect_ints(run(make_node("Abs", 1), {Value::integers({3, -4}, {2}, ElementType::i32)})[0], ElementType::i32, {2},
              {3, 4});
  expect_ints(run(make_node("Sign", 1), {Value::integers({3, -4, 0}, {3})})[0], ElementType::i64, {3}, {1, -1, 0});
  expect_values(run(make_node("Round", 1), {f32_value({0.5, 1.5, 2.5, -0.5, -1.6}, {5})})[0], ElementType::f32, {5},
                {0, 2, 2, -0, -2}, 0.0);
  expect_error<UnsupportedError>([] { run(make_node("Exp", 1), {Value::integers({1}, {1})}); },
                                 {"node 'test_Exp'", "int64", "not supported"});
}

// ---------------------------------------------------------------------------------------
// Comparisons and logic: bool outputs, no gradient.

TEST(OnnxOps_elementwise, ComparisonsAndLogic) {
  for (DType dtype : kBoth) {
    const Value a = typed_value({1, 2, 3, 4, 5, 6}, {2, 3}, dtype);
    const Value b = typed_value({2, 2, 5}, {3}, dtype);
    expect_ints(run(make_node("Equal", 2), {a, b})[0], ElementType::boolean, {2, 3}, {0, 1, 0, 0, 0, 0});
    expect_ints(run(make_node("Less", 2), {a, b})[0], ElementType::boolean, {2, 3}, {1, 0, 1, 0, 0, 0});
    expect_ints(run(make_node("Greater", 2), {a, b})[0], ElementType::boolean, {2, 3}, {0, 0, 0, 1, 1, 1});
    expect_ints(run(make_node("LessOrEqual", 2), {a, b})[0], ElementType::boolean, {2, 3}, {1, 1, 1, 0, 0, 0});
    expect_ints(run(make_node("GreaterOrEqual", 2), {a, b})[0], ElementType::boolean, {2, 3}, {0, 1, 0, 1, 1, 1});
  }
  expect_ints(run(make_node("Equal", 2), {Value::integers({4, 5}, {2}), Value::integers({5}, {})})[0],
              ElementType::boolean, {2}, {0, 1});
  const Value p = Value::integers({1, 1, 0, 0}, {4}, ElementType::boolean);
  const Value q = Value::integers({1, 0, 1, 0}, {4}, ElementType::boolean);
  expect_ints(run(make_node("And", 2), {p, q})[0], ElementType::boolean, {4}, {1, 0, 0, 0});
  expect_ints(run(make_node("Or", 2), {p, q})[0], ElementType::boolean, {4}, {1, 1, 1, 0});
  expect_ints(run(make_node("Xor", 2), {p, q})[0], ElementType::boolean, {4}, {0, 1, 1, 0});
  expect_ints(run(make_node("Not", 1), {p})[0], ElementType::boolean, {4}, {0, 0, 1, 1});
  auto op = builtin_ops().create(make_node("Less", 2));
  op->forward({f64_value({1}, {1}), f64_value({2}, {1})});
  EXPECT_FALSE(op->differentiable_input(0));
  EXPECT_FALSE(op->backward({Tensor()})[0].defined());
  expect_error<InvalidArgument>([&] { run(make_node("And", 2), {p, f32_value({1, 0, 1, 0}, {4})}); },
                                {"node 'test_And'", "bool"});
}

// ---------------------------------------------------------------------------------------
// Variadic Sum, Mean, Max, Min.

TEST(OnnxOps_elementwise, VariadicForward) {
  for (DType dtype : kBoth) {
    const Value a = typed_value({1, 5, 3, 0}, {2, 2}, dtype);
    const Value b = typed_value({2, 2}, {2}, dtype);
    const Value c = typed_value({4}, {}, dtype);
    expect_values(run(make_node("Sum", 3), {a, b, c})[0], type_of(dtype), {2, 2}, {7, 11, 9, 6}, 0.0);
    expect_values(run(make_node("Mean", 3), {a, b, c})[0], type_of(dtype), {2, 2}, {7. / 3, 11. / 3, 3, 2},
                  tolerance_of(dtype));
    expect_values(run(make_node("Max", 3), {a, b, c})[0], type_of(dtype), {2, 2}, {4, 5, 4, 4}, 0.0);
    expect_values(run(make_node("Min", 3), {a, b, c})[0], type_of(dtype), {2, 2}, {1, 2, 2, 0}, 0.0);
    expect_values(run(make_node("Max", 1), {a})[0], type_of(dtype), {2, 2}, {1, 5, 3, 0}, 0.0);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const char* op : {"Max", "Min"}) {
    const auto got = run(make_node(op, 2), {f64_value({1, nan}, {2}), f64_value({nan, 2}, {2})})[0].tensor.to_vector<double>();
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1])) << op << ": a NaN propagates";
  }
  expect_ints(run(make_node("Max", 2), {Value::integers({1, 9}, {2}), Value::integers({5}, {})})[0], ElementType::i64,
              {2}, {5, 9});
}

TEST(OnnxOps_elementwise, VariadicGradients) {
  const Value a = random_value({2, 3}, 3);
  const Value b = random_value({3}, 4);
  const Value c = random_value({2, 1}, 5);
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) check_gradients(make_node(op, 3), {a, b, c});
  // A tie splits the gradient evenly, as PyTorch's maximum does.
  auto op = builtin_ops().create(make_node("Max", 2));
  op->forward({f64_value({2, 1}, {2}), f64_value({2, 3}, {2})});
  const auto grads = op->backward({f64_value({1, 1}, {2}).tensor});
  EXPECT_EQ(grads[0].to_vector<double>(), (std::vector<double>{0.5, 0}));
  EXPECT_EQ(grads[1].to_vector<double>(), (std::vector<double>{0.5, 1}));
}

// ---------------------------------------------------------------------------------------
// Where, Clip, Cast, Identity, Dropout.

TEST(OnnxOps_elementwise, WhereBroadcastsAndRoutesGradients) {
  const Value cond = Value::integers({1, 0, 1}, {3}, ElementType::boolean);
  for (DType dtype : kBoth) {
    const auto out = run(make_node("Where", 3),
                         {cond, typed_value({1, 2, 3, 4, 5, 6}, {2, 3}, dtype), typed_value({-1}, {}, dtype)});
    expect_values(out[0], type_of(dtype), {2, 3}, {1, -1, 3, 4, -1, 6}, 0.0);
  }
  expect_ints(run(make_node("Where", 3), {cond, Value::integers({7}, {}), Value::integers({8, 9, 10}, {3})})[0],
              ElementType::i64, {3}, {7, 9, 7});
  check_gradients(make_node("Where", 3), {cond, random_value({2, 3}, 6), random_value({2, 1}, 7)});
}

TEST(OnnxOps_elementwise, ClipBoundsFromInputsAndAttributes) {
  for (DType dtype : kBoth) {
    const Value x = typed_value({-3, -1, 0.5, 2, 7}, {5}, dtype);
    const auto both = run(make_node("Clip", 3, 1, 13), {x, typed_value({-1.5}, {}, dtype), typed_value({2}, {}, dtype)});
    expect_values(both[0], type_of(dtype), {5}, {-1.5, -1, 0.5, 2, 2}, 0.0);
    const auto max_only = run(make_node("Clip", 3, 1, 13), {x, Value(), typed_value({0}, {}, dtype)});
    expect_values(max_only[0], type_of(dtype), {5}, {-3, -1, 0, 0, 0}, 0.0);
  }
  const auto nan = run(make_node("Clip", 3, 1, 13), {f64_value({std::nan("")}, {1}), f64_value({0}, {}), f64_value({1}, {})});
  EXPECT_TRUE(std::isnan(nan[0].tensor.to_vector<double>()[0]));
  NodeSpec old = make_node("Clip", 1, 1, 6);
  set_float(old, "min", -1.0);
  expect_values(run(old, {f64_value({-3, 4}, {2})})[0], ElementType::f64, {2}, {-1, 4}, 0.0);
  expect_ints(run(make_node("Clip", 3, 1, 13), {Value::integers({-9, 3, 9}, {3}, ElementType::i8),
                                               Value::integers({-5}, {}, ElementType::i8),
                                               Value::integers({5}, {}, ElementType::i8)})[0],
              ElementType::i8, {3}, {-5, 3, 5});
  check_gradients(make_node("Clip", 3, 1, 13), {f64_value({-3, -0.5, 0.5, 3}, {4}), f64_value({-1}, {}), f64_value({1}, {})});
  expect_error<InvalidArgument>(
      [] { run(make_node("Clip", 3, 1, 13), {f64_value({1}, {1}), f64_value({0, 1}, {2}), Value()}); },
      {"node 'test_Clip'", "'min'", "scalar"});
}

NodeSpec cast_to(int data_type) {
  NodeSpec node = make_node("Cast", 1);
  set_int(node, "to", data_type);
  return node;
}

TEST(OnnxOps_elementwise, CastBetweenEveryType) {
  const Value x = f32_value({1.7, -1.7, 2.5, 0, 300}, {5});
  expect_ints(run(cast_to(7), {x})[0], ElementType::i64, {5}, {1, -1, 2, 0, 300});    // toward zero
  expect_ints(run(cast_to(9), {x})[0], ElementType::boolean, {5}, {1, 1, 1, 0, 1});   // != 0
  expect_ints(run(cast_to(3), {x})[0], ElementType::i8, {5}, {1, -1, 2, 0, 44});      // 300 wraps in int8
  expect_ints(run(cast_to(2), {Value::integers({-1, 256}, {2})})[0], ElementType::u8, {2}, {255, 0});
  expect_values(run(cast_to(11), {x})[0], ElementType::f64, {5}, {1.7f, -1.7f, 2.5, 0, 300}, 0.0);
  expect_values(run(cast_to(1), {f64_value({0.1}, {1})})[0], ElementType::f32, {1}, {0.1f}, 0.0);
  expect_values(run(cast_to(1), {Value::integers({1, 0}, {2}, ElementType::boolean)})[0], ElementType::f32, {2}, {1, 0},
                0.0);
  expect_values(run(cast_to(11), {Value::integers({-5}, {1}, ElementType::i32)})[0], ElementType::f64, {1}, {-5}, 0.0);
  // CastLike takes the type of its second input.
  expect_ints(run(make_node("CastLike", 2), {x, Value::integers({0}, {1}, ElementType::i32)})[0], ElementType::i32, {5},
              {1, -1, 2, 0, 300});
  // The gradient flows between floating types only.
  check_gradients(cast_to(11), {random_value({3}, 8)});
  auto to_int = builtin_ops().create(cast_to(7));
  to_int->forward({random_value({3}, 8)});
  EXPECT_FALSE(to_int->differentiable_input(0));
  for (int unsupported : {10, 8, 16, 4, 13}) {
    expect_error<UnsupportedError>([&] { builtin_ops().create(cast_to(unsupported)); },
                                   {"node 'test_Cast' (Cast, opset 17)", "Cast to"});
  }
  expect_error<UnsupportedError>([] { builtin_ops().create(cast_to(10)); }, {"Cast to float16 is not supported"});
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("Cast", 1)); }, {"node 'test_Cast'", "'to'"});
}

TEST(OnnxOps_elementwise, IdentityAndInferenceDropout) {
  const Value x = random_value({2, 3}, 9);
  EXPECT_EQ(doubles(run(make_node("Identity", 1), {x})[0]), doubles(x));
  check_gradients(make_node("Identity", 1), {x});
  const auto out = run(make_node("Dropout", 1, 2, 13), {x});
  EXPECT_EQ(doubles(out[0]), doubles(x));
  expect_ints(out[1], ElementType::boolean, {2, 3}, {1, 1, 1, 1, 1, 1});
  const Value on = Value::integers({1}, {}, ElementType::boolean);
  const Value off = Value::integers({0}, {}, ElementType::boolean);
  EXPECT_EQ(doubles(run(make_node("Dropout", 3, 1, 13), {x, f64_value({0.3}, {}), off})[0]), doubles(x));
  // Training mode with ratio 0 keeps everything; with any other ratio it is refused.
  EXPECT_EQ(doubles(run(make_node("Dropout", 3, 1, 13), {x, f64_value({0}, {}), on})[0]), doubles(x));
  expect_error<UnsupportedError>([&] { run(make_node("Dropout", 3, 1, 13), {x, f64_value({0.3}, {}), on}); },
                                 {"node 'test_Dropout' (Dropout, opset 13)", "training_mode", "not supported"});
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("Dropout", 1, 2, 9)); },
                                 {"node 'test_Dropout' (Dropout, opset 9)", "mask"});
  check_gradients(make_node("Dropout", 1, 1, 13), {x});
}

}  // namespace
}  // namespace tessera::onnx::test
