// The ONNX shape ops (src/onnx/ops_shape.cpp) against hand values and finite differences.
#include <functional>
#include <limits>

#include "expect_error.hpp"
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

using tessera::testing::expect_error;
using Ints = std::vector<std::int64_t>;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

Value run1(const NodeSpec& node, const std::vector<Value>& inputs) {
  std::vector<Value> out = run(node, inputs);
  EXPECT_EQ(out.size(), 1u) << node.where();
  return out.at(0);
}

Value ints(const Ints& v, const Shape& shape) { return Value::integers(v, shape); }
Value ints(const Ints& v) { return Value::integers(v, Shape{static_cast<std::int64_t>(v.size())}); }

Value f32(const std::vector<float>& v, const Shape& shape) { return Value::floating(Tensor::from_vector(v, shape)); }

// 0, 1, 2, ... in the given storage, so every output element names the input element it copied.
Value iota(const Shape& shape, ElementType type) {
  const std::int64_t n = shape_numel(shape);
  if (type == ElementType::f32) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
    return f32(v, shape);
  }
  if (type == ElementType::f64) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(i);
    return f64_value(v, shape);
  }
  Ints v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return Value::integers(v, shape, type);
}

// The elements of any value as int64 (the tests' values are whole numbers).
Ints elements(const Value& v) {
  if (v.type == ElementType::f32) {
    const auto f = v.tensor.to_vector<float>();
    return Ints(f.begin(), f.end());
  }
  if (v.type == ElementType::f64) {
    const auto d = v.tensor.to_vector<double>();
    return Ints(d.begin(), d.end());
  }
  return v.tensor.to_vector<std::int64_t>();
}

void expect_value(const Value& v, ElementType type, const Shape& shape, const Ints& expected) {
  EXPECT_EQ(v.type, type);
  EXPECT_EQ(v.shape(), shape);
  EXPECT_EQ(elements(v), expected);
}

const ElementType kTypes[] = {ElementType::f32, ElementType::f64, ElementType::i64};

// ---- Views ------------------------------------------------------------------------------

TEST(OnnxOps_shape, ReshapeCopiesZerosAndInfersMinusOne) {
  for (ElementType type : kTypes) {
    const NodeSpec node = make_node("Reshape", 2);
    const Value out = run1(node, {iota({2, 3, 4}, type), ints({0, -1, 2})});
    expect_value(out, type, {2, 6, 2}, elements(iota({2, 3, 4}, type)));
  }
}

TEST(OnnxOps_shape, ReshapeAllowZeroKeepsAnEmptyDimension) {
  NodeSpec node = make_node("Reshape", 2, 1, 14);
  set_int(node, "allowzero", 1);
  expect_value(run1(node, {iota({0, 3}, ElementType::f32), ints({3, 0})}), ElementType::f32, {3, 0}, {});
  // Without allowzero the same 0 copies the input's dimension.
  const NodeSpec plain = make_node("Reshape", 2, 1, 14);
  expect_value(run1(plain, {iota({2, 3}, ElementType::i64), ints({0, 3})}), ElementType::i64, {2, 3},
               {0, 1, 2, 3, 4, 5});
}

TEST(OnnxOps_shape, ReshapeRefusals) {
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("Reshape", 1, 1, 4)); },
                                 {"Reshape", "opset 4", "before opset 5"});
  const NodeSpec node = make_node("Reshape", 2);
  expect_error<InvalidArgument>(
      [&] {
        run(node, {iota({2, 3}, ElementType::f32), ints({-1, -1})});
      },
      {"more than one -1"});
  expect_error<InvalidArgument>(
      [&] {
        run(node, {iota({2, 3}, ElementType::f32), ints({kMax, 4, -1})});
      },
      {"Reshape", "more elements than int64 counts"});
  expect_error<InvalidArgument>(
      [&] {
        run(node, {iota({2, 3}, ElementType::f32), ints({4, 2})});
      },
      {"cannot reshape [2, 3] to [4, 2]"});
  expect_error<InvalidArgument>([&] { run(node, {iota({2, 3}, ElementType::f32), ints({-1, 4})}); }, {"cannot infer"});
  expect_error<InvalidArgument>(
      [&] {
        run(node, {iota({2, 3}, ElementType::f32), f32({6}, {1})});
      },
      {"the shape", "expected an integer tensor"});
}

TEST(OnnxOps_shape, ReshapeGradient) {
  check_gradients(make_node("Reshape", 2), {random_value({2, 3, 2}, 1), ints({3, -1})});
}

TEST(OnnxOps_shape, FlattenAtEveryAxis) {
  const Value x = iota({2, 3, 4}, ElementType::f64);
  const std::pair<std::int64_t, Shape> cases[] = {{0, {1, 24}}, {1, {2, 12}}, {2, {6, 4}},
                                                  {3, {24, 1}}, {-1, {6, 4}}, {-3, {1, 24}}};
  for (const auto& c : cases) {
    NodeSpec node = make_node("Flatten", 1);
    set_int(node, "axis", c.first);
    expect_value(run1(node, {x}), ElementType::f64, c.second, elements(x));
  }
  NodeSpec bad = make_node("Flatten", 1);
  set_int(bad, "axis", 4);
  expect_error<InvalidArgument>([&] { run(bad, {x}); }, {"Flatten", "axis 4 is out of range"});
  check_gradients(make_node("Flatten", 1), {random_value({2, 3, 2}, 2)});
}

TEST(OnnxOps_shape, SqueezeAxesAsInputFromOpset13AndAttributeBefore) {
  const Value x = iota({1, 3, 1, 2}, ElementType::i64);
  expect_value(run1(make_node("Squeeze", 2, 1, 13), {x, ints({-2})}), ElementType::i64, {1, 3, 2}, elements(x));
  NodeSpec old = make_node("Squeeze", 1, 1, 11);
  set_ints(old, "axes", {0});
  expect_value(run1(old, {x}), ElementType::i64, {3, 1, 2}, elements(x));
  // No axes: every dimension of 1.
  expect_value(run1(make_node("Squeeze", 1, 1, 13), {x}), ElementType::i64, {3, 2}, elements(x));
  expect_error<InvalidArgument>(
      [&] {
        run(make_node("Squeeze", 2, 1, 13), {x, ints({1})});
      },
      {"axis 1 of [1, 3, 1, 2] is not 1"});
  expect_error<UnsupportedError>(
      [&] {
        run(make_node("Squeeze", 2, 1, 13), {x, ints({})});
      },
      {"Squeeze", "empty 'axes'"});
  check_gradients(make_node("Squeeze", 2, 1, 13), {random_value({1, 3, 1}, 3), ints({0, 2})});
}

TEST(OnnxOps_shape, UnsqueezeAxesIndexTheOutput) {
  const Value x = iota({2, 3}, ElementType::f32);
  expect_value(run1(make_node("Unsqueeze", 2), {x, ints({-1, 0})}), ElementType::f32, {1, 2, 3, 1}, elements(x));
  NodeSpec old = make_node("Unsqueeze", 1, 1, 12);
  set_ints(old, "axes", {1});
  expect_value(run1(old, {x}), ElementType::f32, {2, 1, 3}, elements(x));
  // The shape subgraphs' scalar -> [1] on int64.
  expect_value(run1(make_node("Unsqueeze", 2), {ints({7}, {}), ints({0})}), ElementType::i64, {1}, {7});
  expect_error<InvalidArgument>([&] { run(make_node("Unsqueeze", 2), {x, ints({1, -3})}); }, {"axes", "repeat"});
  expect_error<InvalidArgument>([&] { run(make_node("Unsqueeze", 1), {x}); }, {"Unsqueeze", "axes are missing"});
  check_gradients(make_node("Unsqueeze", 2), {random_value({2, 3}, 4), ints({1})});
}

TEST(OnnxOps_shape, AxesInTheWrongFormAreRefusedByName) {
  NodeSpec attribute_at_13 = make_node("Squeeze", 1, 1, 13);
  set_ints(attribute_at_13, "axes", {0});
  expect_error<UnsupportedError>([&] { builtin_ops().create(attribute_at_13); },
                                 {"Squeeze", "opset 13", "the attribute 'axes'", "not supported"});
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("Unsqueeze", 2, 1, 11)); },
                                 {"Unsqueeze", "opset 11", "'axes' as an input"});
}

// ---- Index maps -------------------------------------------------------------------------

TEST(OnnxOps_shape, TransposePermutesAndDefaultsToReversing) {
  for (ElementType type : kTypes) {
    NodeSpec node = make_node("Transpose", 1);
    set_ints(node, "perm", {1, 2, 0});
    // out[j][k][i] = in[i][j][k] with in = iota([2, 3, 2]): element i * 6 + j * 2 + k.
    expect_value(run1(node, {iota({2, 3, 2}, type)}), type, {3, 2, 2}, {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11});
  }
  expect_value(run1(make_node("Transpose", 1), {iota({2, 3}, ElementType::i64)}), ElementType::i64, {3, 2},
               {0, 3, 1, 4, 2, 5});
  NodeSpec bad = make_node("Transpose", 1);
  set_ints(bad, "perm", {0, 0});
  expect_error<InvalidArgument>([&] { run(bad, {iota({2, 3}, ElementType::f32)}); }, {"Transpose", "perm", "repeat"});
  NodeSpec node = make_node("Transpose", 1);
  set_ints(node, "perm", {2, 0, 1});
  check_gradients(node, {random_value({2, 3, 2}, 5)});
}

TEST(OnnxOps_shape, ExpandBroadcastsBothWays) {
  for (ElementType type : kTypes) {
    // [3, 1] to [2, 1, 2]: the 1 in the shape keeps the input's 3.
    expect_value(run1(make_node("Expand", 2), {iota({3, 1}, type), ints({2, 1, 2})}), type, {2, 3, 2},
                 {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2});
  }
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Expand", 2), {iota({3}, ElementType::f32), ints({2})});
      },
      {"Expand", "do not broadcast"});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Expand", 2), {iota({1}, ElementType::f32), ints({-1})});
      },
      {"Expand", "negative dimension"});
  check_gradients(make_node("Expand", 2), {random_value({3, 1}, 6), ints({2, 3, 4})});
}

TEST(OnnxOps_shape, TileRepeatsEachDimension) {
  for (ElementType type : kTypes) {
    expect_value(run1(make_node("Tile", 2), {iota({2, 2}, type), ints({2, 3})}), type, {4, 6},
                 {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3});
  }
  expect_error<UnsupportedError>([] { builtin_ops().create(make_node("Tile", 3, 1, 1)); }, {"Tile", "before opset 6"});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Tile", 2), {iota({2}, ElementType::f32), ints({1, 2})});
      },
      {"repeats"});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Tile", 2), {iota({2}, ElementType::f32), ints({kMax})});
      },
      {"Tile", "more elements than int64 counts"});
  check_gradients(make_node("Tile", 2), {random_value({2, 3}, 7), ints({2, 2})});
}

TEST(OnnxOps_shape, SliceStartsEndsAxesSteps) {
  for (ElementType type : kTypes) {
    // x[1:, ::2] of a [3, 4].
    expect_value(
        run1(make_node("Slice", 5), {iota({3, 4}, type), ints({1, 0}), ints({kMax, 4}), ints({0, 1}), ints({1, 2})}),
        type, {2, 2}, {4, 6, 8, 10});
  }
  const Value x = iota({2, 5}, ElementType::f32);
  // Axes omitted: the first len(starts) dimensions; ends past the end clamp.
  expect_value(run1(make_node("Slice", 3), {x, ints({1}), ints({100})}), ElementType::f32, {1, 5}, {5, 6, 7, 8, 9});
  // The periodic wrap's x[..., -1:] and x[..., :1] (exported with INT64_MAX ends).
  expect_value(run1(make_node("Slice", 5), {x, ints({-1}), ints({kMax}), ints({-1}), ints({1})}), ElementType::f32,
               {2, 1}, {4, 9});
  // Empty when start passes end.
  expect_value(run1(make_node("Slice", 4), {x, ints({3}), ints({2}), ints({1})}), ElementType::f32, {2, 0}, {});
}

TEST(OnnxOps_shape, SliceNegativeStepsClampHugeEnds) {
  const Value x = iota({6}, ElementType::i64);
  // The exporter reverses F.pad's pads with start -1, end -INT64_MAX, step -1: all of it.
  expect_value(run1(make_node("Slice", 5), {x, ints({-1}), ints({-kMax}), ints({0}), ints({-1})}), ElementType::i64,
               {6}, {5, 4, 3, 2, 1, 0});
  expect_value(run1(make_node("Slice", 5), {x, ints({kMax}), ints({kMin}), ints({0}), ints({-2})}), ElementType::i64,
               {3}, {5, 3, 1});
  expect_value(run1(make_node("Slice", 5), {x, ints({4}), ints({1}), ints({0}), ints({-2})}), ElementType::i64, {2},
               {4, 2});
  // Backwards from before the first index: the spec's text and its reference disagree.
  expect_error<UnsupportedError>(
      [&] {
        run(make_node("Slice", 5), {x, ints({-100}), ints({-100}), ints({0}), ints({-1})});
      },
      {"Slice", "negative step from before the first index", "start -100"});
  // A step of INT64_MIN takes the first element only.
  expect_value(run1(make_node("Slice", 5), {x, ints({-1}), ints({kMin}), ints({0}), ints({kMin})}), ElementType::i64,
               {1}, {5});
  expect_value(
      run1(make_node("Slice", 5), {iota({0}, ElementType::i64), ints({-1}), ints({kMin}), ints({0}), ints({-1})}),
      ElementType::i64, {0}, {});
  expect_error<InvalidArgument>(
      [&] {
        run(make_node("Slice", 5), {x, ints({0}), ints({3}), ints({0}), ints({0})});
      },
      {"Slice", "step is 0"});
}

TEST(OnnxOps_shape, SliceAttributesBeforeOpset10) {
  NodeSpec node = make_node("Slice", 1, 1, 9);
  set_ints(node, "starts", {1});
  set_ints(node, "ends", {-1});
  set_ints(node, "axes", {1});
  expect_value(run1(node, {iota({2, 4}, ElementType::f64)}), ElementType::f64, {2, 2}, {1, 2, 5, 6});
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("Slice", 1, 1, 9)); },
                                {"Slice", "'starts' is missing"});
}

TEST(OnnxOps_shape, SliceGradient) {
  check_gradients(make_node("Slice", 5),
                  {random_value({3, 5}, 8), ints({-1, 1}), ints({kMin, kMax}), ints({0, 1}), ints({-2, 2})});
}

TEST(OnnxOps_shape, GatherAnyAxisNegativeIndices) {
  for (ElementType type : kTypes) {
    NodeSpec node = make_node("Gather", 2);
    set_int(node, "axis", 1);
    expect_value(run1(node, {iota({2, 3}, type), ints({-1, 0, 2, 0}, {2, 2})}), type, {2, 2, 2},
                 {2, 0, 2, 0, 5, 3, 5, 3});
  }
  // The shape subgraphs' Gather of one dimension: a scalar index gives a scalar.
  expect_value(run1(make_node("Gather", 2), {ints({1, 16, 24}), ints({-1}, {})}), ElementType::i64, {}, {24});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Gather", 2), {iota({3}, ElementType::f32), ints({3})});
      },
      {"Gather", "index 3 is out of range"});
}

TEST(OnnxOps_shape, GatherGradientAddsRepeatedIndices) {
  NodeSpec node = make_node("Gather", 2);
  set_int(node, "axis", -1);
  check_gradients(node, {random_value({2, 4}, 9), ints({1, -3, 3}, {3})});
  // By hand: index 0 read twice gets both gradients.
  auto op = builtin_ops().create(make_node("Gather", 2));
  op->forward({f64_value({1, 2}, {2}), ints({0, 0, 1})});
  EXPECT_FALSE(op->differentiable_input(1));
  const std::vector<Tensor> g = op->backward({Tensor::from_vector(std::vector<double>{1, 10, 100}, {3})});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{11, 100}));
  EXPECT_FALSE(g[1].defined());
}

TEST(OnnxOps_shape, GatherElements) {
  NodeSpec node = make_node("GatherElements", 2);
  set_int(node, "axis", 1);
  // out[i][j] = x[i][index[i][j]].
  expect_value(run1(node, {iota({2, 3}, ElementType::f32), ints({2, -3, 1, 1}, {2, 2})}), ElementType::f32, {2, 2},
               {2, 0, 4, 4});
  check_gradients(node, {random_value({2, 3}, 10), ints({0, 0, 2, 1}, {2, 2})});
}

// ---- Blocks -----------------------------------------------------------------------------

TEST(OnnxOps_shape, ConcatAlongAnyAxis) {
  for (ElementType type : kTypes) {
    NodeSpec node = make_node("Concat", 2);
    set_int(node, "axis", -1);
    expect_value(run1(node, {iota({2, 1}, type), iota({2, 2}, type)}), type, {2, 3}, {0, 0, 1, 1, 2, 3});
  }
  // The shape subgraphs' [dims..., -1] on int64, and a bool value keeps its type.
  NodeSpec node = make_node("Concat", 3);
  set_int(node, "axis", 0);
  expect_value(run1(node, {ints({1, 16}), ints({}), ints({-1})}), ElementType::i64, {3}, {1, 16, -1});
  const Value mask = Value::integers({1, 0}, {2}, ElementType::boolean);
  expect_value(run1(node, {mask, mask, mask}), ElementType::boolean, {6}, {1, 0, 1, 0, 1, 0});
  expect_error<InvalidArgument>([&] { run(node, {mask, ints({1})}); }, {"Concat", "does not join"});
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("Concat", 2)); }, {"Concat", "'axis' is missing"});
}

TEST(OnnxOps_shape, ConcatGradient) {
  NodeSpec node = make_node("Concat", 3);
  set_int(node, "axis", 1);
  check_gradients(node, {random_value({2, 1, 2}, 11), random_value({2, 3, 2}, 12), random_value({2, 0, 2}, 13)});
}

TEST(OnnxOps_shape, SplitBySizesInputAttributeOrEqualParts) {
  for (ElementType type : kTypes) {
    NodeSpec node = make_node("Split", 2, 2, 13);
    set_int(node, "axis", 1);
    const std::vector<Value> out = run(node, {iota({2, 3}, type), ints({1, 2})});
    ASSERT_EQ(out.size(), 2u);
    expect_value(out[0], type, {2, 1}, {0, 3});
    expect_value(out[1], type, {2, 2}, {1, 2, 4, 5});
  }
  NodeSpec old = make_node("Split", 1, 2, 11);
  set_ints(old, "split", {3, 1});
  const std::vector<Value> by_attribute = run(old, {iota({4}, ElementType::i64)});
  expect_value(by_attribute[1], ElementType::i64, {1}, {3});
  const std::vector<Value> equal = run(make_node("Split", 1, 3, 13), {iota({6}, ElementType::f32)});
  expect_value(equal[2], ElementType::f32, {2}, {4, 5});
  expect_error<InvalidArgument>([] { run(make_node("Split", 1, 4, 13), {iota({6}, ElementType::f32)}); },
                                {"Split", "cannot split 6 into 4 equal pieces"});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Split", 2, 2, 13), {iota({6}, ElementType::f32), ints({2, 3})});
      },
      {"Split", "split [2, 3] does not cut"});
}

TEST(OnnxOps_shape, SplitNumOutputsFromOpset18) {
  NodeSpec node = make_node("Split", 1, 3, 18);
  set_int(node, "num_outputs", 3);
  const std::vector<Value> out = run(node, {iota({5}, ElementType::f64)});  // ceil(5 / 3) = 2: 2, 2, 1
  expect_value(out[0], ElementType::f64, {2}, {0, 1});
  expect_value(out[2], ElementType::f64, {1}, {4});
  NodeSpec early = make_node("Split", 1, 3, 13);
  set_int(early, "num_outputs", 3);
  expect_error<UnsupportedError>([&] { builtin_ops().create(early); }, {"Split", "'num_outputs' before opset 18"});
  NodeSpec mismatch = make_node("Split", 1, 2, 18);
  set_int(mismatch, "num_outputs", 3);
  expect_error<InvalidArgument>([&] { builtin_ops().create(mismatch); }, {"Split", "num_outputs is 3 for 2 outputs"});
  NodeSpec attribute_at_13 = make_node("Split", 1, 2, 13);
  set_ints(attribute_at_13, "split", {1, 1});
  expect_error<UnsupportedError>([&] { builtin_ops().create(attribute_at_13); }, {"Split", "the attribute 'split'"});
}

TEST(OnnxOps_shape, SplitGradientWithAnUnusedOutput) {
  NodeSpec node = make_node("Split", 2, 2, 13);
  set_int(node, "axis", -1);
  check_gradients(node, {random_value({2, 5}, 14), ints({2, 3})});
  auto op = builtin_ops().create(node);
  op->forward({f64_value({1, 2, 3}, {3}), ints({1, 2})});
  const std::vector<Tensor> g = op->backward({Tensor(), Tensor::from_vector(std::vector<double>{5, 6}, {2})});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0, 5, 6}));
  EXPECT_FALSE(g[1].defined());
}

// ---- Shapes and constants ---------------------------------------------------------------

TEST(OnnxOps_shape, ShapeWithStartAndEnd) {
  const Value x = iota({2, 3, 4, 5}, ElementType::f32);
  expect_value(run1(make_node("Shape", 1, 1, 13), {x}), ElementType::i64, {4}, {2, 3, 4, 5});
  NodeSpec node = make_node("Shape", 1, 1, 15);
  set_int(node, "start", -3);
  set_int(node, "end", -1);
  expect_value(run1(node, {x}), ElementType::i64, {2}, {3, 4});
  set_int(node, "start", 10);
  expect_value(run1(node, {x}), ElementType::i64, {0}, {});
  expect_value(run1(make_node("Size", 1), {x}), ElementType::i64, {}, {120});
  auto op = builtin_ops().create(make_node("Shape", 1));
  op->forward({random_value({2}, 1)});
  EXPECT_FALSE(op->differentiable_input(0));
  EXPECT_FALSE(op->backward({Tensor()}).at(0).defined());
}

TEST(OnnxOps_shape, ConstantFromEachValueAttribute) {
  NodeSpec node = make_node("Constant", 0);
  node.attributes["value"].kind = Attribute::Kind::tensor;
  node.attributes["value"].t = ints({3, 4}, {2});
  expect_value(run1(node, {}), ElementType::i64, {2}, {3, 4});
  const auto with = [](const std::function<void(NodeSpec&)>& set) {
    NodeSpec n = make_node("Constant", 0);
    set(n);
    return run1(n, {});
  };
  expect_value(with([](NodeSpec& n) { set_float(n, "value_float", 2.0); }), ElementType::f32, {}, {2});
  expect_value(with([](NodeSpec& n) { set_floats(n, "value_floats", {1, 2}); }), ElementType::f32, {2}, {1, 2});
  expect_value(with([](NodeSpec& n) { set_int(n, "value_int", -7); }), ElementType::i64, {}, {-7});
  expect_value(with([](NodeSpec& n) { set_ints(n, "value_ints", {5, 6, 7}); }), ElementType::i64, {3}, {5, 6, 7});
  EXPECT_TRUE(builtin_ops().create(node)->backward({Tensor()}).empty());
}

TEST(OnnxOps_shape, ConstantRefusals) {
  for (const char* key : {"sparse_value", "value_string", "value_strings"}) {
    NodeSpec node = make_node("Constant", 0);
    set_string(node, key, "x");
    expect_error<UnsupportedError>([&] { builtin_ops().create(node); }, {"Constant", key, "not supported"});
  }
  expect_error<InvalidArgument>([] { builtin_ops().create(make_node("Constant", 0)); },
                                {"Constant", "exactly one value attribute"});
  NodeSpec two = make_node("Constant", 0);
  set_int(two, "value_int", 1);
  set_float(two, "value_float", 1);
  expect_error<InvalidArgument>([&] { builtin_ops().create(two); }, {"exactly one value attribute, it has 2"});
}

TEST(OnnxOps_shape, ConstantOfShape) {
  expect_value(run1(make_node("ConstantOfShape", 1), {ints({2, 3})}), ElementType::f32, {2, 3}, Ints(6, 0));
  NodeSpec node = make_node("ConstantOfShape", 1);
  node.attributes["value"].kind = Attribute::Kind::tensor;
  node.attributes["value"].t = ints({9}, {1});
  expect_value(run1(node, {ints({4})}), ElementType::i64, {4}, {9, 9, 9, 9});
  expect_value(run1(node, {ints({})}), ElementType::i64, {}, {9});  // an empty shape: a scalar
  node.attributes["value"].t = f64_value({1.5}, {1});
  const Value half = run1(node, {ints({2})});
  EXPECT_EQ(half.type, ElementType::f64);
  EXPECT_EQ(half.tensor.to_vector<double>(), (std::vector<double>{1.5, 1.5}));
  expect_error<InvalidArgument>([&] { run(node, {ints({-1})}); }, {"ConstantOfShape", "negative dimension"});
}

TEST(OnnxOps_shape, RangeOfEachType) {
  expect_value(run1(make_node("Range", 3), {ints({10}, {}), ints({1}, {}), ints({-3}, {})}), ElementType::i64, {3},
               {10, 7, 4});
  expect_value(run1(make_node("Range", 3), {ints({0}, {}), ints({0}, {}), ints({1}, {})}), ElementType::i64, {0}, {});
  const Value r = run1(make_node("Range", 3), {f32({1}, {}), f32({2}, {}), f32({0.25f}, {})});
  EXPECT_EQ(r.type, ElementType::f32);
  EXPECT_EQ(r.tensor.to_vector<float>(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  expect_value(run1(make_node("Range", 3), {f64_value({0}, {}), f64_value({-3}, {}), f64_value({-1.5}, {})}),
               ElementType::f64, {2}, {0, -1});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Range", 3), {ints({0}, {}), ints({5}, {}), ints({0}, {})});
      },
      {"Range", "delta is 0"});
  expect_error<InvalidArgument>(
      [] {
        run(make_node("Range", 3), {ints({0}, {}), f32({5}, {}), ints({1}, {})});
      },
      {"Range", "scalars of one type"});
}

// The exporter's shape arithmetic as it runs: Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, all int64 but the data.
TEST(OnnxOps_shape, ShapeSubgraphReshapesTheData) {
  const Value x = iota({2, 3, 4}, ElementType::f32);
  const Value shape = run1(make_node("Shape", 1), {x});
  const Value batch = run1(make_node("Gather", 2), {shape, ints({0}, {})});
  const Value batch1 = run1(make_node("Unsqueeze", 2), {batch, ints({0})});
  NodeSpec concat = make_node("Concat", 2);
  set_int(concat, "axis", 0);
  const Value target = run1(concat, {batch1, ints({-1})});
  expect_value(target, ElementType::i64, {2}, {2, -1});
  expect_value(run1(make_node("Reshape", 2), {x, target}), ElementType::f32, {2, 12}, elements(x));
}

TEST(OnnxOps_shape, EveryOpIsRegistered) {
  for (const char* op :
       {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Tile", "Slice", "Gather",
        "GatherElements", "Concat", "Split", "Shape", "Size", "Constant", "ConstantOfShape", "Range"}) {
    EXPECT_TRUE(builtin_ops().contains(op)) << op;
  }
}

// Gradients are computed in the input's own precision: an f32 input gets an f32 gradient.
TEST(OnnxOps_shape, F32GradientsStayF32) {
  NodeSpec node = make_node("Transpose", 1);
  auto op = builtin_ops().create(node);
  op->forward({random_value({2, 3}, 15, DType::f32)});
  const std::vector<Tensor> g = op->backward({random_value({3, 2}, 16, DType::f32).tensor});
  EXPECT_EQ(g[0].dtype(), DType::f32);
  EXPECT_EQ(g[0].shape(), (Shape{2, 3}));
  // An integer input gets no gradient.
  auto int_op = builtin_ops().create(node);
  int_op->forward({iota({2, 3}, ElementType::i64)});
  EXPECT_FALSE(int_op->backward({Tensor()}).at(0).defined());
}

}  // namespace
}  // namespace tessera::onnx::test
