// Imported graphs run domain-parallel (OnnxModel::split_over) against their serial twins,
// at 1, 2 and 4 ranks, f64: every rank's block of the output and of the input's gradient,
// and every parameter's gradient, within 1e-12 of the same graph run whole on one rank.
// The graphs are built in code from the built-in ops (no file, no PyTorch), one per
// placement rule: a halo of a strided and a dilated Conv, MaxPool's padding (never the
// maximum), a Pad (edge, reflect) before a Conv, a periodic wrap written as Slice + Concat,
// GroupNorm's Reshape + InstanceNormalization + Reshape back, linear and nearest Resize,
// a tiling ConvTranspose, global means into a Gemm head. Each runs on the grids the rank
// count allows, uneven blocks included. Refusals: a node that cannot run split throws the
// same UnsupportedError naming it on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "mpi_test.hpp"
#include "op_test_support.hpp"
#include "onnx/graph.hpp"
#include "onnx/op.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/error.hpp"
#include "tessera/onnx/onnx_model.hpp"
#include "tessera/optim.hpp"

namespace tessera::onnx::test {
namespace {

// The op tests' deterministic values (op_test_support.hpp), as a tensor.
Tensor random_tensor(const Shape& shape, std::uint64_t seed) { return random_value(shape, seed).tensor; }

Attribute ints(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::integers;
  a.ints = std::move(v);
  return a;
}
Attribute integer(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::integer;
  a.i = v;
  return a;
}
Attribute text(const std::string& v) {
  Attribute a;
  a.kind = Attribute::Kind::string;
  a.s = v;
  return a;
}

// A graph under construction: x [1, C, lat, lon] in, y out.
struct Builder {
  Graph g;
  int count = 0;
  std::uint64_t seed = 10;
  Builder(std::int64_t channels, std::int64_t lat, std::int64_t lon) {
    g.opsets[""] = 13;
    g.inputs.push_back({"x", ElementType::f64, {1, channels, lat, lon}, true});
  }
  std::string weight(const Shape& shape) {
    const std::string name = "w" + std::to_string(g.initializers.size());
    g.initializers[name] = Value::floating(random_tensor(shape, seed++));
    return name;
  }
  std::string constant(const std::vector<std::int64_t>& v) {
    const std::string name = "k" + std::to_string(g.initializers.size());
    g.initializers[name] = Value::integers(v, {static_cast<std::int64_t>(v.size())});
    return name;
  }
  std::string floats(const std::vector<double>& v) {
    const std::string name = "f" + std::to_string(g.initializers.size());
    g.initializers[name] = Value::floating(Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}));
    return name;
  }
  std::string add(const std::string& op, std::vector<std::string> in, std::map<std::string, Attribute> attrs = {}) {
    NodeSpec n;
    n.op_type = op;
    n.name = "/" + op + "_" + std::to_string(count);
    n.opset = 13;
    n.inputs = std::move(in);
    n.outputs = {"v" + std::to_string(count++)};
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
    return n.outputs[0];
  }
  std::string conv(const std::string& x, std::int64_t c_in, std::int64_t c_out, std::int64_t k,
                   std::map<std::string, Attribute> attrs) {
    return add("Conv", {x, weight({c_out, c_in, k, k}), weight({c_out})}, std::move(attrs));
  }
  Graph done(const std::string& y, const Shape& shape) {
    g.outputs.push_back({y, ElementType::f64, shape, true});
    sort_and_check_graph(g);
    return g;
  }
};

using GraphMaker = std::function<Graph()>;

// The serial twin and the split run of one graph, compared on this rank's blocks.
void expect_split_matches_serial(const GraphMaker& make, domain::ProcessGrid grid) {
  const Graph graph = make();
  const Shape x_shape = graph.inputs[0].shape;
  const Tensor x = random_tensor(x_shape, 1);
  OnnxModel serial(graph);
  const Tensor y = serial.forward(x);
  const Tensor w = random_tensor(y.shape(), 2);
  serial.zero_grad();
  const Tensor dx = serial.backward(w);

  Communicator comm(MPI_COMM_WORLD);
  domain::Decomposition d(comm, {x_shape[2], x_shape[3]}, grid);
  OnnxModel split(graph);
  split.split_over(d);
  const domain::LocalBox box = d.box();
  const Tensor x_local = x.narrow(2, box.lat.start, box.lat.length).narrow(3, box.lon.start, box.lon.length).contiguous();
  const Tensor y_local = split.forward(x_local);
  const OnnxModel::OutputSplit how = split.output_split(0);
  Tensor y_expected = y, w_local = w;
  if (how.split) {
    y_expected = y.narrow(how.lat_axis, how.box.lat.start, how.box.lat.length)
                     .narrow(how.lon_axis, how.box.lon.start, how.box.lon.length)
                     .contiguous();
    w_local = w.narrow(how.lat_axis, how.box.lat.start, how.box.lat.length)
                  .narrow(how.lon_axis, how.box.lon.start, how.box.lon.length)
                  .contiguous();
  }
  ASSERT_EQ(y_local.shape(), y_expected.shape()) << split.placement_summary();
  const std::vector<double> got = y_local.to_vector<double>(), want = y_expected.to_vector<double>();
  for (std::size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], want[k], 1e-12) << "output element " << k;
  split.zero_grad();
  const Tensor dx_local = split.backward(w_local);
  const std::vector<double> dx_got = dx_local.to_vector<double>();
  const std::vector<double> dx_want =
      dx.narrow(2, box.lat.start, box.lat.length).narrow(3, box.lon.start, box.lon.length).contiguous().to_vector<double>();
  ASSERT_EQ(dx_got.size(), dx_want.size());
  for (std::size_t k = 0; k < dx_got.size(); ++k) ASSERT_NEAR(dx_got[k], dx_want[k], 1e-12) << "input gradient " << k;
  const auto serial_params = serial.named_parameters();
  const auto split_params = split.named_parameters();
  ASSERT_EQ(serial_params.size(), split_params.size());
  for (std::size_t p = 0; p < serial_params.size(); ++p) {
    const std::vector<double> a = serial_params[p].second->grad.to_vector<double>();
    const std::vector<double> b = split_params[p].second->grad.to_vector<double>();
    for (std::size_t k = 0; k < a.size(); ++k) {
      ASSERT_NEAR(b[k], a[k], 1e-12) << "gradient of " << serial_params[p].first << " element " << k;
    }
  }
}

// The process grids to try at this rank count.
std::vector<domain::ProcessGrid> grids() {
  switch (testing::world_size()) {
    case 1: return {{1, 1}};
    case 2: return {{2, 1}, {1, 2}};
    case 4: return {{2, 2}, {4, 1}, {1, 4}};
    default: return {{testing::world_size(), 1}};
  }
}

void expect_on_every_grid(const GraphMaker& make) {
  for (const domain::ProcessGrid& grid : grids()) {
    SCOPED_TRACE("process grid " + grid.str());
    expect_split_matches_serial(make, grid);
  }
}

TEST(OnnxDomain, ConvHalosStrideAndDilation) {
  expect_on_every_grid([] {
    Builder b(2, 8, 12);  // 8 x 12: blocks of 4 or 2 rows, 12, 6 or 3 columns
    std::string v = b.conv("x", 2, 3, 3, {{"pads", ints({1, 1, 1, 1})}});
    v = b.add("Tanh", {v});
    v = b.conv(v, 3, 3, 3, {{"pads", ints({2, 2, 2, 2})}, {"dilations", ints({2, 2})}});
    v = b.conv(v, 3, 2, 5, {{"pads", ints({2, 2, 2, 2})}});
    return b.done(v, {1, 2, 8, 12});
  });
  expect_on_every_grid([] {
    Builder b(2, 8, 8);
    std::string v = b.conv("x", 2, 3, 3, {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}});
    return b.done(v, {1, 3, 4, 4});
  });
}

TEST(OnnxDomain, UnevenBlocks) {
  expect_on_every_grid([] {
    Builder b(1, 7, 9);  // 7 rows over 2 or 4 ranks: 4 + 3, 2 + 2 + 2 + 1
    std::string v = b.conv("x", 1, 2, 3, {{"pads", ints({1, 1, 1, 1})}});
    v = b.add("Relu", {v});
    return b.done(b.conv(v, 2, 1, 3, {{"pads", ints({1, 1, 1, 1})}}), {1, 1, 7, 9});
  });
}

TEST(OnnxDomain, PoolsReadTheirOwnPadding) {
  expect_on_every_grid([] {
    Builder b(2, 8, 8);
    // Negative inputs everywhere: a zero halo at the field's edge would win the max.
    std::string v = b.add("Sub", {"x", b.floats({2.0})});
    v = b.add("MaxPool", {v}, {{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}});
    v = b.add("AveragePool", {v}, {{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}, {"count_include_pad", integer(1)}});
    v = b.add("MaxPool", {v}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}});
    return b.done(b.conv(v, 2, 2, 1, {}), {1, 2, 4, 4});
  });
}

TEST(OnnxDomain, PadModesBeforeAConv) {
  for (const char* mode : {"constant", "edge", "reflect"}) {
    SCOPED_TRACE(mode);
    expect_on_every_grid([mode] {
      Builder b(2, 16, 12);  // reflect 2 needs 3 rows at the edge ranks: 16 / 4
      std::string v = b.add("Pad", {"x", b.constant({0, 0, 2, 2, 0, 0, 1, 1})}, {{"mode", text(mode)}});
      return b.done(b.conv(v, 2, 2, 4, {}), {1, 2, 16, 12});
    });
  }
}

TEST(OnnxDomain, PeriodicWrapAsSliceAndConcat) {
  expect_on_every_grid([] {
    Builder b(2, 8, 12);
    const std::string last = b.add("Slice", {"x", b.constant({-2}), b.constant({INT64_MAX}), b.constant({3})});
    const std::string first = b.add("Slice", {"x", b.constant({0}), b.constant({2}), b.constant({3})});
    std::string v = b.add("Concat", {last, "x", first}, {{"axis", integer(3)}});
    v = b.add("Pad", {v, b.constant({0, 0, 2, 0, 0, 0, 2, 0})});
    return b.done(b.conv(v, 2, 3, 5, {}), {1, 3, 8, 12});
  });
}

TEST(OnnxDomain, GroupNormAsExported) {
  expect_on_every_grid([] {
    Builder b(4, 8, 8);
    std::string v = b.add("Reshape", {"x", b.constant({1, 2, -1})});
    v = b.add("InstanceNormalization", {v, b.floats({1.0, 1.0}), b.floats({0.0, 0.0})}, {});
    const std::string shape = b.add("Shape", {"x"});
    v = b.add("Reshape", {v, shape});
    v = b.add("Mul", {v, b.weight({4, 1, 1})});
    v = b.add("Add", {v, b.weight({4, 1, 1})});
    return b.done(b.conv(v, 4, 2, 3, {{"pads", ints({1, 1, 1, 1})}}), {1, 2, 8, 8});
  });
}

TEST(OnnxDomain, ResizeAndConvTranspose) {
  for (const char* mode : {"nearest", "linear"}) {
    SCOPED_TRACE(mode);
    expect_on_every_grid([mode] {
      Builder b(2, 4, 4);
      const std::string scales = b.g.initializers.emplace("scales", Value::floating(Tensor::from_vector(std::vector<double>{1, 1, 2, 2}, {4}))).first->first;
      std::map<std::string, Attribute> attrs{{"mode", text(mode)}};
      if (std::string(mode) == "nearest") {
        attrs["coordinate_transformation_mode"] = text("asymmetric");
        attrs["nearest_mode"] = text("floor");
      }
      std::string v = b.add("Resize", {"x", "", scales}, attrs);
      v = b.conv(v, 2, 2, 3, {{"pads", ints({1, 1, 1, 1})}});
      v = b.add("ConvTranspose", {v, b.weight({2, 2, 2, 2}), b.weight({2})}, {{"strides", ints({2, 2})}});
      return b.done(v, {1, 2, 16, 16});
    });
  }
}

TEST(OnnxDomain, GlobalMeansIntoAWholeHead) {
  expect_on_every_grid([] {
    Builder b(2, 8, 8);
    std::string v = b.conv("x", 2, 3, 3, {{"pads", ints({1, 1, 1, 1})}});
    const std::string pooled = b.add("GlobalAveragePool", {v});
    const std::string mean = b.add("ReduceMean", {v}, {{"axes", ints({2, 3})}, {"keepdims", integer(1)}});
    v = b.add("Add", {pooled, mean});
    v = b.add("Flatten", {v});
    NodeSpec gemm;
    v = b.add("Gemm", {v, b.weight({4, 3}), b.weight({4})}, {{"transB", integer(1)}});
    return b.done(v, {1, 4});
  });
}

// Training split: the parameters' gradients are the full ones on every rank, so AdamW
// steps on the split graph track the serial graph's step by step, with no gradient sync.
TEST(OnnxDomain, AdamWStepsTrackTheSerialGraph) {
  auto make = [] {
    Builder b(4, 8, 8);
    std::string v = b.conv("x", 4, 4, 3, {{"pads", ints({1, 1, 1, 1})}});
    v = b.add("Reshape", {v, b.constant({1, 2, -1})});
    v = b.add("InstanceNormalization", {v, b.floats({1.0, 1.0}), b.floats({0.0, 0.0})}, {});
    v = b.add("Reshape", {v, b.add("Shape", {"x"})});
    v = b.add("Mul", {v, b.weight({4, 1, 1})});
    v = b.add("Tanh", {v});
    return b.done(b.conv(v, 4, 2, 3, {{"pads", ints({1, 1, 1, 1})}}), {1, 2, 8, 8});
  };
  const Graph graph = make();
  Communicator comm(MPI_COMM_WORLD);
  domain::Decomposition d(comm, {8, 8}, grids().front());
  const domain::LocalBox box = d.box();
  auto block = [&](const Tensor& t) {
    return t.narrow(2, box.lat.start, box.lat.length).narrow(3, box.lon.start, box.lon.length).contiguous();
  };
  OnnxModel serial(graph), split(graph);
  split.split_over(d);
  AdamW serial_optimizer(serial.named_parameters(), AdamWOptions{.lr = 1e-2});
  AdamW split_optimizer(split.named_parameters(), AdamWOptions{.lr = 1e-2});
  double moved = 0;
  for (int step = 0; step < 4; ++step) {
    const Tensor x = random_tensor({1, 4, 8, 8}, 100 + step), w = random_tensor({1, 2, 8, 8}, 200 + step);
    serial_optimizer.zero_grad();
    (void)serial.forward(x);
    serial.backward(w);
    serial_optimizer.step();
    split_optimizer.zero_grad();
    (void)split.forward(block(x));
    split.backward(block(w));
    split_optimizer.step();
    const auto a = serial.named_parameters(), b = split.named_parameters();
    for (std::size_t p = 0; p < a.size(); ++p) {
      const std::vector<double> va = a[p].second->value.to_vector<double>(), vb = b[p].second->value.to_vector<double>();
      for (std::size_t k = 0; k < va.size(); ++k) {
        ASSERT_NEAR(vb[k], va[k], 1e-12) << "step " << step << ", " << a[p].first << "[" << k << "]";
      }
    }
  }
  const auto first = make().initializers;
  for (const auto& [name, p] : serial.named_parameters()) {
    const std::vector<double> now = p->value.to_vector<double>();
    const std::vector<double> then = first.at(name).tensor.to_vector<double>();
    for (std::size_t k = 0; k < now.size(); ++k) moved = std::max(moved, std::abs(now[k] - then[k]));
  }
  EXPECT_GT(moved, 1e-3);  // the steps moved the parameters
}

// Every rank throws the same error naming the node (no rank waits in a collective).
void expect_refused(const GraphMaker& make, const std::string& node, const std::string& why) {
  const Graph graph = make();
  Communicator comm(MPI_COMM_WORLD);
  const Shape& shape = graph.inputs[0].shape;
  domain::Decomposition d(comm, {shape[2], shape[3]}, {testing::world_size(), 1});
  OnnxModel split(graph);
  split.split_over(d);
  const domain::LocalBox box = d.box();
  const Tensor x = random_tensor(shape, 1).narrow(2, box.lat.start, box.lat.length).contiguous();
  try {
    (void)split.forward(x);
    FAIL() << "no error";
  } catch (const UnsupportedError& e) {
    if (!node.empty()) EXPECT_NE(std::string(e.what()).find("node '" + node + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(OnnxDomain, RefusalsNameTheNode) {
  expect_refused(
      [] {
        Builder b(1, 8, 4);
        return b.done(b.add("ReduceMax", {"x"}, {{"axes", ints({2, 3})}}), {1, 1, 1, 1});
      },
      "/ReduceMax_0", "cannot run domain-parallel");
  expect_refused(
      [] {
        Builder b(1, 8, 4);
        std::string v = b.add("Pad", {"x", b.constant({0, 0, 1, 1, 0, 0, 1, 1})});
        return b.done(b.add("Relu", {v}), {1, 1, 10, 6});
      },
      "/Relu_1", "only Conv, MaxPool and AveragePool read split");
  expect_refused(
      [] {
        Builder b(1, 8, 4);  // the padding is passed on as a layout: never returned as the block
        return b.done(b.add("Pad", {"x", b.constant({0, 0, 1, 1, 0, 0, 1, 1})}), {1, 1, 10, 6});
      },
      "", "output 'v0' cannot run domain-parallel");
  expect_refused(
      [] {
        Builder b(1, 8, 4);
        std::string v = b.add("Softmax", {"x"}, {{"axis", integer(2)}});
        return b.done(v, {1, 1, 8, 4});
      },
      "/Softmax_0", "split axis");
  expect_refused(
      [] {
        Builder b(1, 8, 4);  // "valid" conv: the output grid shrinks
        return b.done(b.conv("x", 1, 1, 3, {}), {1, 1, 6, 2});
      },
      "/Conv_0", "same");
}

}  // namespace
}  // namespace tessera::onnx::test
