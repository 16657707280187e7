// The ONNX pooling, padding and resampling ops (src/onnx/ops_pool_resize.cpp) against hand
// values (ONNX's documented examples among them), values PyTorch computed, and finite
// differences in f64.
#include <cmath>
#include <numeric>

#include "op_test_support.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::test {
namespace {

void expect_unsupported(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "expected UnsupportedError '" << what << "'";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find(what + " is not supported"), std::string::npos) << e.what();
  }
}

NodeSpec pool(const std::string& op_type, const Shape& kernel, const Shape& strides = {}, const Shape& pads = {}) {
  NodeSpec node = make_node(op_type, 1);
  set_ints(node, "kernel_shape", kernel);
  if (!strides.empty()) set_ints(node, "strides", strides);
  if (!pads.empty()) set_ints(node, "pads", pads);
  return node;
}

// ---- Pooling

TEST(OnnxOpsPoolResize, MaxPoolHandValues) {
  expect_close_values(run(pool("MaxPool", {2, 2}, {2, 2}), {iota_value({1, 1, 4, 4})})[0], {1, 1, 2, 2}, {5, 7, 13, 15});
  // ONNX's ceil_mode example: 1..16 in 4x4, 3x3 windows at stride 2.
  NodeSpec ceil = pool("MaxPool", {3, 3}, {2, 2});
  set_int(ceil, "ceil_mode", 1);
  expect_close_values(run(ceil, {iota_value({1, 1, 4, 4}, 1)})[0], {1, 1, 2, 2}, {11, 12, 15, 16});
  // Padding never wins a maximum, even over negative values.
  const auto y = run(pool("MaxPool", {3}, {1}, {1, 1}), {f64_value({-3, -1, -2}, {1, 1, 3})});
  expect_close_values(y[0], {1, 1, 3}, {-1, -1, -1});
}

TEST(OnnxOpsPoolResize, MaxPoolOfIntegers) {
  // uint8 images pool in their own type (forward only).
  const auto y = run(pool("MaxPool", {2}, {2}), {Value::integers({3, 250, 7, 1}, {1, 1, 4}, ElementType::u8)});
  EXPECT_EQ(y[0].type, ElementType::u8);
  EXPECT_EQ(y[0].to_ints("pooled"), (std::vector<std::int64_t>{250, 7}));
  expect_unsupported(
      [] {
        run(pool("AveragePool", {2}), {Value::integers({1, 2}, {1, 1, 2}, ElementType::u8)});
      },
      "the input X of type uint8");
}

TEST(OnnxOpsPoolResize, MaxPoolIndices) {
  NodeSpec node = pool("MaxPool", {2, 2}, {2, 2});
  node.outputs.push_back("indices");
  const auto y = run(node, {f64_value({1, 9, 2, 3, 4, 5, 8, 6, 7, 0, 1, 2, 3, 4, 5, 6, /* second plane */ 16,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 17},
                                      {1, 2, 4, 4})});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[1].type, ElementType::i64);
  EXPECT_EQ(y[1].to_ints("indices"), (std::vector<std::int64_t>{1, 6, 8, 15, 16, 18, 24, 31}));
  // storage_order 1: the place in the plane counts down the columns first.
  NodeSpec column_major = node;
  set_int(column_major, "storage_order", 1);
  const Value plane = f64_value({1, 9, 2, 3, 4, 5, 8, 6, 7, 0, 1, 2, 3, 4, 5, 6}, {1, 1, 4, 4});
  EXPECT_EQ(run(column_major, {plane})[1].to_ints("indices"), (std::vector<std::int64_t>{4, 9, 2, 15}));
}

TEST(OnnxOpsPoolResize, AveragePoolHandValues) {
  // ONNX's ceil_mode example: the last windows average only what lies inside.
  NodeSpec ceil = pool("AveragePool", {3, 3}, {2, 2});
  set_int(ceil, "ceil_mode", 1);
  expect_close_values(run(ceil, {iota_value({1, 1, 4, 4}, 1)})[0], {1, 1, 2, 2}, {6, 7.5, 12, 13.5});
  // Over ones with padding 1: excluding the padding every average is 1; including it,
  // a corner sees 4 of 9, an edge 6 of 9.
  const Value ones = f64_value(std::vector<double>(9, 1.0), {1, 1, 3, 3});
  NodeSpec node = pool("AveragePool", {3, 3}, {1, 1}, {1, 1, 1, 1});
  expect_close_values(run(node, {ones})[0], {1, 1, 3, 3}, std::vector<double>(9, 1.0));
  set_int(node, "count_include_pad", 1);
  expect_close_values(run(node, {ones})[0], {1, 1, 3, 3},
                {4.0 / 9, 6.0 / 9, 4.0 / 9, 6.0 / 9, 1, 6.0 / 9, 4.0 / 9, 6.0 / 9, 4.0 / 9});
}

TEST(OnnxOpsPoolResize, GlobalPools) {
  const Value x = f64_value({1, 5, 3, 2, -1, -4, -2, -8}, {1, 2, 2, 2});
  expect_close_values(run(make_node("GlobalAveragePool", 1), {x})[0], {1, 2, 1, 1}, {2.75, -3.75});
  expect_close_values(run(make_node("GlobalMaxPool", 1), {x})[0], {1, 2, 1, 1}, {5, -1});
  check_gradients(make_node("GlobalAveragePool", 1), {random_value({2, 3, 4, 3}, 1)});
  check_gradients(make_node("GlobalMaxPool", 1), {random_value({2, 3, 5}, 2)});
  check_gradients(make_node("GlobalAveragePool", 1), {random_value({1, 2, 2, 3, 2}, 3)});
}

TEST(OnnxOpsPoolResize, PoolingGradients) {
  struct Case {
    std::string label;
    NodeSpec node;
    Shape x;
  };
  std::vector<Case> cases;
  for (const std::string op : {"MaxPool", "AveragePool"}) {
    cases.push_back({"stride 2", pool(op, {3, 3}, {2, 2}), {2, 2, 7, 6}});
    cases.push_back({"asymmetric pads", pool(op, {2, 3}, {1, 2}, {1, 0, 0, 2}), {1, 2, 5, 6}});
    NodeSpec ceil = pool(op, {3, 2}, {2, 2}, {1, 0, 0, 0});
    set_int(ceil, "ceil_mode", 1);
    cases.push_back({"ceil_mode", ceil, {1, 2, 6, 5}});
    NodeSpec dilated = pool(op, {2, 2}, {1, 1}, {1, 1, 1, 1});
    set_ints(dilated, "dilations", {2, 2});
    cases.push_back({"dilation 2", dilated, {1, 1, 5, 5}});
    NodeSpec same = pool(op, {3, 2}, {2, 2});
    set_string(same, "auto_pad", "SAME_UPPER");
    cases.push_back({"SAME_UPPER", same, {1, 2, 5, 5}});
    cases.push_back({"1-D", pool(op, {3}, {2}, {1, 1}), {2, 3, 8}});
    cases.push_back({"3-D", pool(op, {2, 2, 2}, {1, 2, 1}), {1, 2, 3, 4, 3}});
  }
  NodeSpec include_pad = pool("AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1});
  set_int(include_pad, "count_include_pad", 1);
  set_int(include_pad, "ceil_mode", 1);
  cases.push_back({"count_include_pad with ceil_mode", include_pad, {1, 2, 6, 6}});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.op_type + " " + c.label);
    check_gradients(c.node, {random_value(c.x, 7)});
  }
}

// ---- Pad

TEST(OnnxOpsPoolResize, PadHandValues) {
  // ONNX's documented examples.
  const Value x = f64_value({1.0, 1.2, 2.3, 3.4, 4.5, 5.7}, {3, 2});
  const Value pads = Value::integers({0, 2, 0, 0}, {4});
  NodeSpec node = make_node("Pad", 2);
  expect_close_values(run(node, {x, pads})[0], {3, 4}, {0, 0, 1.0, 1.2, 0, 0, 2.3, 3.4, 0, 0, 4.5, 5.7});
  set_string(node, "mode", "reflect");
  expect_close_values(run(node, {x, pads})[0], {3, 4}, {1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7});
  set_string(node, "mode", "edge");
  expect_close_values(run(node, {x, pads})[0], {3, 4}, {1.0, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7});
  set_string(node, "mode", "wrap");
  node.opset = 19;
  expect_close_values(run(node, {x, pads})[0], {3, 4}, {1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7});
  // A constant value, negative pads (a crop) and axes (opset 18).
  NodeSpec constant = make_node("Pad", 4, 1, 18);
  expect_close_values(run(constant, {iota_value({2, 3}), Value::integers({1, -1}, {2}), f64_value({-7}, {}),
                               Value::integers({-1}, {1})})[0],
                {2, 3}, {-7, 0, 1, -7, 3, 4});
  // Integer data pads in its own type.
  const auto ints =
      run(make_node("Pad", 3), {Value::integers({4, 5}, {2}, ElementType::i32), Value::integers({1, 1}, {2}),
                                Value::integers({-1}, {}, ElementType::i32)});
  EXPECT_EQ(ints[0].type, ElementType::i32);
  EXPECT_EQ(ints[0].to_ints("padded"), (std::vector<std::int64_t>{-1, 4, 5, -1}));
  // Pad-2: pads and value as attributes.
  NodeSpec old = make_node("Pad", 1, 1, 2);
  set_ints(old, "pads", {1, 0});
  set_float(old, "value", 2.5);
  expect_close_values(run(old, {f64_value({1, 2}, {2})})[0], {3}, {2.5, 1, 2});
}

TEST(OnnxOpsPoolResize, PadGradients) {
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    SCOPED_TRACE(mode);
    NodeSpec node = make_node("Pad", 3, 1, 19);
    set_string(node, "mode", mode);
    // Reflect pads wider than the axis fold back again; the last axis is cropped at the end.
    check_gradients(node,
                    {random_value({2, 3, 4}, 5), Value::integers({0, 4, 2, 1, 2, -1}, {6}), f64_value({0.5}, {})});
  }
  NodeSpec bad = make_node("Pad", 2);
  set_string(bad, "mode", "mirror");
  expect_unsupported([&] { builtin_ops().create(bad); }, "mode 'mirror'");
}

// ---- Resize and Upsample

// A Resize node with the given modes; inputs X, roi, scales, sizes.
NodeSpec resize(const std::string& mode, const std::string& transform, const std::string& nearest = "") {
  NodeSpec node = make_node("Resize", 4, 1, 13);
  set_string(node, "mode", mode);
  set_string(node, "coordinate_transformation_mode", transform);
  if (!nearest.empty()) set_string(node, "nearest_mode", nearest);
  return node;
}

Value scales(const std::vector<double>& s) { return f64_value(s, {static_cast<std::int64_t>(s.size())}); }
Value sizes(const std::vector<std::int64_t>& s) { return Value::integers(s, {static_cast<std::int64_t>(s.size())}); }

TEST(OnnxOpsPoolResize, ResizeHandValues) {
  const Value x = f64_value({1, 2, 3, 4}, {1, 1, 2, 2});
  // ONNX's examples: nearest 2 x 3 upsampling, linear half_pixel 2x.
  expect_close_values(run(resize("nearest", "half_pixel"), {x, Value{}, scales({1, 1, 2, 3}), Value{}})[0], {1, 1, 4, 6},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  expect_close_values(run(resize("linear", "half_pixel"), {x, Value{}, scales({1, 1, 2, 2}), Value{}})[0], {1, 1, 4, 4},
                {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  // align_corners: the corners stay, thirds between.
  expect_close_values(run(resize("linear", "align_corners"), {f64_value({0, 3}, {1, 2}), Value{}, Value{}, sizes({1, 4})})[0],
                {1, 4}, {0, 1, 2, 3});
  // The nearest modes on 0, 1, 2, 3 downsampled by 0.8 under half_pixel (x -> (x + .5) / .8 - .5):
  // 0.125, 1.375, 2.625 round to 0, 1, 3 (ceil: 1, 2, 3; floor: 0, 1, 2).
  const Value line = f64_value({0, 1, 2, 3}, {4});
  expect_close_values(run(resize("nearest", "half_pixel", "round_prefer_floor"), {line, Value{}, scales({0.8}), Value{}})[0],
                {3}, {0, 1, 3});
  expect_close_values(run(resize("nearest", "half_pixel", "ceil"), {line, Value{}, scales({0.8}), Value{}})[0], {3},
                {1, 2, 3});
  expect_close_values(run(resize("nearest", "half_pixel", "floor"), {line, Value{}, scales({0.8}), Value{}})[0], {3},
                {0, 1, 2});
  // Halfway: 2x under asymmetric puts output 1 at 0.5: round_prefer_floor 0, round_prefer_ceil 1.
  expect_close_values(run(resize("nearest", "asymmetric", "round_prefer_floor"), {line, Value{}, scales({2}), Value{}})[0],
                {8}, {0, 0, 1, 1, 2, 2, 3, 3});
  expect_close_values(run(resize("nearest", "asymmetric", "round_prefer_ceil"), {line, Value{}, scales({2}), Value{}})[0],
                {8}, {0, 1, 1, 2, 2, 3, 3, 3});
}

TEST(OnnxOpsPoolResize, ResizeAxesAndUpsample) {
  NodeSpec node = resize("nearest", "asymmetric", "floor");
  node.opset = 18;
  set_ints(node, "axes", {-1});
  expect_close_values(run(node, {iota_value({2, 2}), Value{}, scales({1.5}), Value{}})[0], {2, 3}, {0, 0, 1, 2, 2, 3});
  // Upsample-9: scales as an input; nearest reads floor(x / scale).
  NodeSpec up = make_node("Upsample", 2, 1, 9);
  expect_close_values(run(up, {f64_value({1, 2, 3, 4}, {1, 1, 2, 2}), scales({1, 1, 2, 3})})[0], {1, 1, 4, 6},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  // Upsample-7: scales as an attribute; linear is asymmetric, clamped at the end.
  NodeSpec up7 = make_node("Upsample", 1, 1, 7);
  set_string(up7, "mode", "linear");
  set_floats(up7, "scales", {1, 2});
  expect_close_values(run(up7, {f64_value({0, 2}, {1, 2})})[0], {1, 4}, {0, 1, 2, 2});
  check_gradients(up7, {random_value({2, 3}, 2)});
  check_gradients(up, {random_value({1, 2, 2, 3}, 3), scales({1, 1, 2, 1.5})});
}

TEST(OnnxOpsPoolResize, ResizeGradients) {
  struct Case {
    std::string mode, transform;
    std::vector<double> s;
    Shape size;
    Shape x;
  };
  const std::vector<Case> cases = {
      {"linear", "align_corners", {1, 1, 2, 2}, {}, {1, 2, 3, 4}},
      {"linear", "half_pixel", {1, 1, 2, 3}, {}, {2, 1, 3, 2}},
      {"linear", "half_pixel", {1, 1, 0.5, 0.6}, {}, {1, 2, 6, 5}},
      {"linear", "pytorch_half_pixel", {}, {1, 2, 1, 7}, {1, 2, 3, 4}},
      {"linear", "asymmetric", {1, 1, 1.5}, {}, {1, 2, 5}},
      {"linear", "align_corners", {1, 1, 2, 2, 1.5}, {}, {1, 1, 2, 3, 2}},
      {"nearest", "half_pixel", {1, 1, 1.7, 0.6}, {}, {1, 2, 4, 5}},
      {"nearest", "asymmetric", {}, {2, 2, 5, 3}, {2, 1, 3, 4}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode + " " + c.transform);
    const NodeSpec node = resize(c.mode, c.transform);
    check_gradients(node, {random_value(c.x, 9), Value{}, c.s.empty() ? Value{} : scales(c.s),
                           c.size.empty() ? Value{} : sizes(c.size)});
  }
}

// ---- Against PyTorch 1.13 (float64) on sine_value inputs.

// kTorchMaxPoolCeil [1, 2, 3, 4]
const std::vector<double> kTorchMaxPoolCeil = {
    0.73223144403025142, 0.93561600155338587, 0.99995764649874008, 0.9289597150038692,  0.74917434833168939,
    0.99987170871813902, 0.99987170871813902, 0.72757329097145973, 0.74917434833168939, 0.99987170871813902,
    0.99987170871813902, 0.72757329097145973, 0.94034039140988412, 0.99973933703685303, 0.92382825338512753,
    0.46499537373421967, 0.94034039140988412, 0.99973933703685303, 0.92382825338512753, 0.75813222158724503,
    0.99956053760220442, 0.99956053760220442, 0.75813222158724503, 0.75813222158724503};
// kTorchAvgPoolCeilIncludePad [1, 1, 4, 3]
const std::vector<double> kTorchAvgPoolCeilIncludePad = {
    0.24599009567333521,  0.37591978720599561,   0.19251667636399253,  -0.073224197570564309,
    -0.14073953186487095, -0.090947096190811122, 0.096639401472716074, 0.13234492859709976,
    0.057739669301825183, -0.03604066669615906,  -0.29469363775681862, -0.30771659277969721};
// kTorchBilinear [1, 1, 5, 7]
const std::vector<double> kTorchBilinear = {
    0.099833416646828155,  0.22592372690834245,  0.42766822332676535,  0.59876470267496384,  0.75828404008389683,
    0.8674114009881978,    0.93561600155338587,  0.4598831085875929,   0.52539473310237705,  0.63021333232603183,
    0.69149705341180234,   0.73941064846614946,  0.7372682394384158,   0.73592923379608199,  0.99995764649874008,
    0.97460124239342905,   0.93403099582493143,  0.83059557951706031,  0.71110056103952823,  0.5420534971137424,
    0.43639908216012629,   0.44888434965565766,  0.36032867423566212,  0.21863959356366944,  0.063353150763069785,
    -0.093158228002203539, -0.24464679639158593, -0.33932715163495003, 0.08150215176026912,  -0.049186371202849313,
    -0.25828800794383883,  -0.44814180173959095, -0.62933075403002514, -0.76911365872847193, -0.85647797416500115};
// kTorchBilinearAlignCorners [1, 1, 5, 7]
const std::vector<double> kTorchBilinearAlignCorners = {
    0.099833416646828155, 0.27635985101294824,   0.45288628537906828,  0.59876470267496384,  0.7446431199708593,
    0.84012956076212264,  0.93561600155338587,   0.54989553157278415,  0.62040926588212642,  0.69092300019146879,
    0.71468014109601208,  0.73843728200055536,   0.71222241192865576,  0.68600754185675605,  0.99995764649874008,
    0.9644586807513047,   0.9289597150038692,    0.83059557951706031,  0.73223144403025142,  0.58431526309518889,
    0.43639908216012629,  0.54072989912950464,   0.43149845018160404,  0.32226700123370333,  0.19122688888873474,
    0.060186776543766085, -0.074926334729335659, -0.21003944600243743, 0.08150215176026912,  -0.10146178038809671,
    -0.28442571253646254, -0.44814180173959089,  -0.61185789094271925, -0.73416793255386015, -0.85647797416500115};
// kTorchNearest [1, 1, 5, 9]
const std::vector<double> kTorchNearest = {
    0.099833416646828155, 0.099833416646828155, 0.099833416646828155, 0.45288628537906828,  0.45288628537906828,
    0.7446431199708593,   0.7446431199708593,   0.93561600155338587,  0.93561600155338587,  0.099833416646828155,
    0.099833416646828155, 0.099833416646828155, 0.45288628537906828,  0.45288628537906828,  0.7446431199708593,
    0.7446431199708593,   0.93561600155338587,  0.93561600155338587,  0.99995764649874008,  0.99995764649874008,
    0.99995764649874008,  0.9289597150038692,   0.9289597150038692,   0.73223144403025142,  0.73223144403025142,
    0.43639908216012629,  0.43639908216012629,  0.99995764649874008,  0.99995764649874008,  0.99995764649874008,
    0.9289597150038692,   0.9289597150038692,   0.73223144403025142,  0.73223144403025142,  0.43639908216012629,
    0.43639908216012629,  0.08150215176026912,  0.08150215176026912,  0.08150215176026912,  -0.28442571253646254,
    -0.28442571253646254, -0.61185789094271925, -0.61185789094271925, -0.85647797416500115, -0.85647797416500115};
// kTorchTrilinear [1, 1, 3, 5, 6]
const std::vector<double> kTorchTrilinear = {
    0.099833416646828155, 0.27635985101294819,   0.50151242447770006,   0.69601698087222741,   0.84012956076212264,
    0.93561600155338587,  0.4598831085875929,    0.55159938290829069,   0.65937612262325984,   0.72361798420034484,
    0.73780384169534907,  0.73592923379608211,   0.99995764649874008,   0.96445868075130459,   0.89617166984159957,
    0.76501948919252105,  0.58431526309518889,   0.43639908216012629,   0.44888434965565766,   0.32490640406766397,
    0.15507002257413682,  -0.028363721047997236, -0.20677465429424038,  -0.33932715163495003,  0.08150215176026912,
    -0.1014617803880967,  -0.33899774227083856,  -0.55728586120834311,  -0.73416793255386015,  -0.85647797416500115,
    -0.44267218242851553, -0.3532491193180079,   -0.2280670986633801,   -0.085031268486899181, 0.06133894975920455,
    0.17195021046118794,  -0.11764327844345508,  -0.034412315205468488, 0.075461073279751892,  0.18203077426868711,
    0.2744790059454984,   0.34028481237507591,   0.36990007753413562,   0.44384289096334073,   0.53075333119445001,
    0.58262383840206666,  0.59418909022493938,   0.59278671524590776,   0.45381066957415661,   0.43777937509283893,
    0.40689071175090147,  0.34746123630842224,   0.2655235742940516,    0.19844328114030074,   0.50975106426750394,
    0.43373703117917101,  0.32431563212186909,   0.19068616824599255,   0.04641323034012633,   -0.064452341596770754,
    -0.98517778150385926, -0.98285808964896404,  -0.95764662180446036,  -0.86607951784602588,  -0.71745166124371362,
    -0.59171558063100993, -0.6951696654745031,   -0.6204240133192277,   -0.50845397606375609,  -0.35955643566297069,
    -0.18884582980435227, -0.055359609045930333, -0.2601574914304689,   -0.076772898824623126, 0.16533499254730052,
    0.40022818761161233,  0.60406291735468987,   0.74917434833168928,   0.45873698949265562,   0.55065234611801406,
    0.65871140092766634,  0.72328619366484193,   0.73782180288234378,   0.73621371391555168,   0.9379999767747389,
    0.96893584274643874,  0.98762900651457686,   0.93865819770032832,   0.82699439323411295,   0.72757329097145962};
// kTorchLinearDown [1, 2, 3]
const std::vector<double> kTorchLinearDown = {0.33520199580165494, 0.93561600155338587,  0.86338362467932983,
                                              0.19980112856022147, -0.61185789094271925, -0.98363132026726252};

TEST(OnnxOpsPoolResize, AgainstPyTorch) {
  // max_pool2d(3, stride 2, padding 1, ceil_mode) and avg_pool2d(the same, count_include_pad)
  NodeSpec max_pool = pool("MaxPool", {3, 3}, {2, 2}, {1, 1, 1, 1});
  set_int(max_pool, "ceil_mode", 1);
  expect_close_values(run(max_pool, {sine_value({1, 2, 5, 6})})[0], {1, 2, 3, 4}, kTorchMaxPoolCeil);
  NodeSpec avg_pool = pool("AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1});
  set_int(avg_pool, "ceil_mode", 1);
  set_int(avg_pool, "count_include_pad", 1);
  expect_close_values(run(avg_pool, {sine_value({1, 1, 6, 5})})[0], {1, 1, 4, 3}, kTorchAvgPoolCeilIncludePad, 1e-13);
  // interpolate(size=...): bilinear is half_pixel (pytorch_half_pixel), align_corners
  // align_corners, nearest asymmetric with floor.
  const Value x = sine_value({1, 1, 3, 4});
  expect_close_values(run(resize("linear", "pytorch_half_pixel"), {x, Value{}, Value{}, sizes({1, 1, 5, 7})})[0],
                {1, 1, 5, 7}, kTorchBilinear, 1e-13);
  expect_close_values(run(resize("linear", "align_corners"), {x, Value{}, Value{}, sizes({1, 1, 5, 7})})[0], {1, 1, 5, 7},
                kTorchBilinearAlignCorners, 1e-13);
  expect_close_values(run(resize("nearest", "asymmetric", "floor"), {x, Value{}, Value{}, sizes({1, 1, 5, 9})})[0],
                {1, 1, 5, 9}, kTorchNearest);
  expect_close_values(
      run(resize("linear", "half_pixel"), {sine_value({1, 1, 2, 3, 4}), Value{}, Value{}, sizes({1, 1, 3, 5, 6})})[0],
      {1, 1, 3, 5, 6}, kTorchTrilinear, 1e-13);
  expect_close_values(run(resize("linear", "half_pixel"), {sine_value({1, 2, 7}), Value{}, Value{}, sizes({1, 2, 3})})[0],
                {1, 2, 3}, kTorchLinearDown, 1e-13);
}

TEST(OnnxOpsPoolResize, ResizeRefusals) {
  expect_unsupported([] { builtin_ops().create(resize("cubic", "half_pixel")); }, "mode 'cubic'");
  expect_unsupported([] { builtin_ops().create(resize("linear", "tf_crop_and_resize")); },
                     "coordinate_transformation_mode 'tf_crop_and_resize'");
  NodeSpec antialias = resize("linear", "half_pixel");
  set_int(antialias, "antialias", 1);
  expect_unsupported([&] { builtin_ops().create(antialias); }, "antialias 1");
  NodeSpec policy = resize("linear", "half_pixel");
  set_string(policy, "keep_aspect_ratio_policy", "not_larger");
  expect_unsupported([&] { builtin_ops().create(policy); }, "keep_aspect_ratio_policy 'not_larger'");
  expect_unsupported([] { builtin_ops().create(make_node("Resize", 2, 1, 10)); }, "Resize before opset 11");
  // align_corners with scales divides by in * scale - 1 unrounded (ONNX's length_resized):
  // 4 -> 2 at scale 0.6 reads 0 and 3 / 1.4.
  expect_close_values(run(resize("linear", "align_corners"), {iota_value({4}), Value{}, scales({0.6}), Value{}})[0], {2},
                {0, 3 / 1.4});
  EXPECT_THROW(run(resize("linear", "half_pixel"), {random_value({1, 1, 2, 2}, 1), Value{}, scales({2, 2}), Value{}}),
               InvalidArgument);
}

}  // namespace
}  // namespace tessera::onnx::test
