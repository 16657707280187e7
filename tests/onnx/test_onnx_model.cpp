// OnnxModel and its executor on graphs built in code with the tests' own ops
// (onnx_test_ops.hpp): forward against hand values, backward against finite
// differences, parameters named by initializers, integer shape values, the graph's
// wiring checks and the input checks. The file reader has its own test
// (test_onnx_file.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.hpp"
#include "onnx/graph.hpp"
#include "onnx_test_ops.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace tessera::onnx::test {
namespace {

using tessera::testing::expect_error;

NodeSpec node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              const std::string& name = "") {
  NodeSpec n;
  n.op_type = op;
  n.name = name.empty() ? op + "_" + out.front() : name;
  n.opset = 17;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

Value floats(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return Value::floating(tensor_of(v, shape, dtype));
}

// y = tanh(x W + b) * tanh(x W + b): a parameter product, a fan-out (h read twice).
Graph mlp_graph(DType dtype) {
  Graph g;
  g.opsets[""] = 17;
  const ElementType type = dtype == DType::f32 ? ElementType::f32 : ElementType::f64;
  g.inputs.push_back({"x", type, {2, 3}, true});
  g.outputs.push_back({"y", type, {2, 4}, true});
  g.initializers["W"] = floats({0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.0, 0.2, -0.3}, {3, 4}, dtype);
  g.initializers["b"] = floats({0.05, -0.1, 0.15, 0.2, -0.25, 0.3, 0.35, -0.4}, {2, 4}, dtype);
  // Written out of order on purpose: the sort puts producers first.
  g.nodes.push_back(node("TMul", {"h", "h"}, {"y"}));
  g.nodes.push_back(node("TTanh", {"z"}, {"h"}));
  g.nodes.push_back(node("TMatMul", {"x", "W"}, {"xw"}));
  g.nodes.push_back(node("TAdd", {"xw", "b"}, {"z"}));
  sort_and_check_graph(g);
  return g;
}

const std::vector<double> kX = {0.3, -0.7, 1.1, 0.5, 0.2, -0.4};

// The MLP by hand.
std::vector<double> mlp_by_hand(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b) {
  std::vector<double> y(8);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      double z = b[i * 4 + j];
      for (int p = 0; p < 3; ++p) z += x[i * 3 + p] * w[p * 4 + j];
      y[i * 4 + j] = std::tanh(z) * std::tanh(z);
    }
  }
  return y;
}

const std::vector<double> kWeight = {0.9, -0.3, 0.4, 1.2, -0.8, 0.6, 0.1, -1.1};

double weighted_sum(const std::vector<double>& y) {
  double s = 0;
  for (std::size_t k = 0; k < y.size(); ++k) s += y[k] * kWeight[k];
  return s;
}

TEST(OnnxModel, SortsTheGraphAndRunsForwardAsByHand) {
  const Graph g = mlp_graph(DType::f64);
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes.front().op_type, "TMatMul");
  EXPECT_EQ(g.nodes.back().op_type, "TMul");
  OnnxModel model(g, test_ops());
  const std::vector<double> y = doubles_of(model.forward(tensor_of(kX, {2, 3}, DType::f64)));
  const std::vector<double> expected =
      mlp_by_hand(kX, doubles_of(g.initializers.at("W").tensor), doubles_of(g.initializers.at("b").tensor));
  ASSERT_EQ(y.size(), expected.size());
  for (std::size_t k = 0; k < y.size(); ++k) EXPECT_NEAR(y[k], expected[k], 1e-14) << k;
}

TEST(OnnxModel, ParametersAreTheFloatingInitializersNamedAsInTheFile) {
  OnnxModel model(mlp_graph(DType::f64), test_ops());
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "W");  // in the order the graph first reads them
  EXPECT_EQ(named[1].first, "b");
  EXPECT_EQ(named[0].second->value.shape(), (Shape{3, 4}));
  const std::string info = model.info();
  EXPECT_NE(info.find("W: f64[3, 4]"), std::string::npos) << info;
  EXPECT_NE(info.find("TMatMul 1"), std::string::npos) << info;
}

// Central differences of sum(y * weight) against the backward pass, in f64, for the
// input and every parameter.
TEST(OnnxModel, BackwardMatchesFiniteDifferences) {
  const Graph g = mlp_graph(DType::f64);
  OnnxModel model(g, test_ops());
  const Tensor x = tensor_of(kX, {2, 3}, DType::f64);
  model.forward(x);
  const std::vector<double> dx = doubles_of(model.backward(tensor_of(kWeight, {2, 4}, DType::f64)));
  const std::vector<double> w = doubles_of(g.initializers.at("W").tensor);
  const std::vector<double> b = doubles_of(g.initializers.at("b").tensor);
  const double h = 1e-6;
  auto check = [&](std::vector<double> values, const std::vector<double>& grad, int which) {
    ASSERT_EQ(values.size(), grad.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
      std::vector<double> up = values, down = values;
      up[k] += h;
      down[k] -= h;
      auto loss = [&](const std::vector<double>& v) {
        return weighted_sum(mlp_by_hand(which == 0 ? v : kX, which == 1 ? v : w, which == 2 ? v : b));
      };
      EXPECT_NEAR(grad[k], (loss(up) - loss(down)) / (2 * h), 1e-8) << "which " << which << " element " << k;
    }
  };
  check(kX, dx, 0);
  const auto named = model.named_parameters();
  check(w, doubles_of(named[0].second->grad), 1);
  check(b, doubles_of(named[1].second->grad), 2);
}

TEST(OnnxModel, BackwardAccumulatesIntoParameterGradients) {
  OnnxModel model(mlp_graph(DType::f64), test_ops());
  const Tensor x = tensor_of(kX, {2, 3}, DType::f64);
  const Tensor dy = tensor_of(kWeight, {2, 4}, DType::f64);
  model.forward(x);
  model.backward(dy);
  const std::vector<double> once = doubles_of(model.named_parameters()[0].second->grad);
  model.forward(x);
  model.backward(dy);
  const std::vector<double> twice = doubles_of(model.named_parameters()[0].second->grad);
  for (std::size_t k = 0; k < once.size(); ++k) EXPECT_NEAR(twice[k], 2 * once[k], 1e-14);
  model.zero_grad();
  for (double v : doubles_of(model.named_parameters()[0].second->grad)) EXPECT_EQ(v, 0.0);
}

TEST(OnnxModel, RunsF32GraphsInF32) {
  OnnxModel model(mlp_graph(DType::f32), test_ops());
  const Tensor y = model.forward(tensor_of(kX, {2, 3}, DType::f32));
  EXPECT_EQ(y.dtype(), DType::f32);
  const Graph g64 = mlp_graph(DType::f64);
  const std::vector<double> expected =
      mlp_by_hand(kX, doubles_of(g64.initializers.at("W").tensor), doubles_of(g64.initializers.at("b").tensor));
  const std::vector<double> got = doubles_of(y);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], expected[k], 1e-6);
  EXPECT_EQ(model.named_parameters()[0].second->grad.dtype(), DType::f32);
}

TEST(OnnxModel, RefusesAnInputOfAnotherDtypeOrShapeNamingIt) {
  OnnxModel model(mlp_graph(DType::f32), test_ops());
  expect_error<InvalidArgument>([&] { model.forward(tensor_of(kX, {2, 3}, DType::f64)); },
                                {"input 'x'", "float[2, 3]", "f64[2, 3]"});
  expect_error<InvalidArgument>([&] { model.forward(Tensor::zeros({3, 2}, DType::f32)); },
                                {"input 'x'", "float[2, 3]", "f32[3, 2]"});
  expect_error<InvalidArgument>([&] { model.backward(Tensor::zeros({2, 4}, DType::f32)); }, {"before forward"});
}

// Shape -> Reshape runs on i64 values; an integer initializer and a floating one read
// only by a non-differentiable input stay constants.
Graph shape_graph() {
  Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", ElementType::f64, {2, 3}, true});
  g.inputs.push_back({"like", ElementType::f64, {3, 2}, true});
  g.outputs.push_back({"y", ElementType::f64, {3, 2}, true});
  g.initializers["factor"] = floats({2.0}, {1}, DType::f64);
  g.nodes.push_back(node("TShape", {"like"}, {"target"}));
  g.nodes.push_back(node("TReshape", {"x", "target"}, {"r"}));
  g.nodes.push_back(node("TScale", {"r", "factor"}, {"y"}));
  sort_and_check_graph(g);
  return g;
}

TEST(OnnxModel, ShapeValuesRunAsIntegersAndConstantsStayConstants) {
  OnnxModel model(shape_graph(), test_ops());
  EXPECT_TRUE(model.named_parameters().empty());
  const std::vector<Tensor> y =
      model.run({tensor_of(kX, {2, 3}, DType::f64), Tensor::zeros({3, 2}, DType::f64)});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{3, 2}));
  const std::vector<double> got = doubles_of(y[0]);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_DOUBLE_EQ(got[k], 2 * kX[k]);
  const std::vector<Tensor> grads = model.backward_all({tensor_of({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f64)});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(doubles_of(grads[0]), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(doubles_of(grads[1]), std::vector<double>(6, 0.0));  // only its shape was read
  expect_error<InvalidArgument>([&] { model.forward(tensor_of(kX, {2, 3}, DType::f64)); },
                                {"2 inputs and 1 outputs", "forward"});
}

// Two outputs of one node, one of them a graph output and one unused.
TEST(OnnxModel, MultipleOutputsAndAnUnusedGradient) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", ElementType::f64, {4, 1}, true});
  g.outputs.push_back({"top", ElementType::f64, {2, 1}, true});
  g.outputs.push_back({"sq", ElementType::f64, {2, 1}, true});
  g.nodes.push_back(node("TSplit2", {"x"}, {"top", "bottom"}, "split"));
  g.nodes.push_back(node("TMul", {"bottom", "bottom"}, {"sq"}));
  sort_and_check_graph(g);
  OnnxModel model(g, test_ops());
  const std::vector<Tensor> y = model.run({tensor_of({1, 2, 3, 4}, {4, 1}, DType::f64)});
  EXPECT_EQ(doubles_of(y[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ(doubles_of(y[1]), (std::vector<double>{9, 16}));
  const std::vector<Tensor> grads = model.backward_all({Tensor(), tensor_of({1, 1}, {2, 1}, DType::f64)});
  EXPECT_EQ(doubles_of(grads[0]), (std::vector<double>{0, 0, 6, 8}));
}

TEST(OnnxModel, AnOpOutsideTheRegistryIsRefusedNamingTheNodeAndOp) {
  Graph g = mlp_graph(DType::f64);
  g.nodes[1].op_type = "Frobnicate";
  expect_error<UnsupportedError>([&] { OnnxModel model(g, test_ops()); },
                                 {"node 'TAdd_z'", "Frobnicate", "opset 17"});
}

TEST(GraphChecks, AValueNothingProducesIsNamedWithItsReader) {
  Graph g = mlp_graph(DType::f64);
  g.initializers.erase("b");
  expect_error<InvalidArgument>([&] { sort_and_check_graph(g); }, {"node 'TAdd_z'", "'b'", "no node"});
}

TEST(GraphChecks, TwoProducersOfOneValueAreRefused) {
  Graph g = mlp_graph(DType::f64);
  g.nodes.push_back(node("TTanh", {"x"}, {"h"}, "second"));
  expect_error<InvalidArgument>([&] { sort_and_check_graph(g); }, {"'h'", "produced twice", "node 'second'"});
}

TEST(GraphChecks, ACycleIsRefusedNamingANodeOnIt) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", ElementType::f64, {1}, true});
  g.outputs.push_back({"c", ElementType::f64, {1}, true});
  g.nodes.push_back(node("TAdd", {"x", "c"}, {"a"}, "first"));
  g.nodes.push_back(node("TTanh", {"a"}, {"c"}, "second"));
  g.nodes.push_back(node("TTanh", {"c"}, {"d"}, "after"));
  expect_error<InvalidArgument>([&] { sort_and_check_graph(g); }, {"cycle", "node 'first'"});
}

TEST(GraphChecks, AGraphOutputNothingProducesIsRefused) {
  Graph g = mlp_graph(DType::f64);
  g.outputs.push_back({"ghost", ElementType::f64, {1}, true});
  expect_error<InvalidArgument>([&] { sort_and_check_graph(g); }, {"output 'ghost'"});
}

}  // namespace
}  // namespace tessera::onnx::test
