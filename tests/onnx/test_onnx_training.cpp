// An imported graph trains like a tessera module: a small CNN graph (Conv, Relu,
// GlobalAveragePool, Flatten, Gemm, on the built-in ops) wrapped in ddp (overlap off) at 1, 2 and 4
// ranks, each rank its share of an 8-sample batch, five AdamW steps, against the same
// graph trained serially on the whole batch: every parameter after every step within
// 1e-12 (f64). The ranks start from perturbed copies, so the ddp broadcast must undo it.
#include <gtest/gtest.h>

#include <cmath>

#include "mpi_test.hpp"
#include "onnx/graph.hpp"
#include "onnx/op.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace tessera::onnx::test {
namespace {

constexpr std::int64_t kSamples = 8;
constexpr int kSteps = 5;

std::vector<double> pseudo_random(std::size_t n, std::uint64_t seed) {
  std::vector<double> v(n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<double>(s >> 11) / static_cast<double>(1ULL << 53) - 0.5;
  }
  return v;
}

Value initializer(const Shape& shape, std::uint64_t seed) {
  return Value::floating(Tensor::from_vector(pseudo_random(static_cast<std::size_t>(shape_numel(shape)), seed), shape));
}

NodeSpec node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  NodeSpec n;
  n.op_type = op;
  n.name = "/" + op;
  n.opset = 13;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

void set_ints(NodeSpec& n, const std::string& key, std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::integers;
  a.ints = std::move(v);
  n.attributes[key] = a;
}

// x [batch, 2, 6, 6] -> Conv 3x3 pad 1 (3 channels) -> Relu -> GlobalAveragePool ->
// Flatten -> Gemm (transB) -> y [batch, 4], as PyTorch's exporter writes such a net.
Graph cnn_graph(std::int64_t batch) {
  Graph g;
  g.opsets[""] = 13;
  g.inputs.push_back({"x", ElementType::f64, {batch, 2, 6, 6}, true});
  g.outputs.push_back({"y", ElementType::f64, {batch, 4}, true});
  g.initializers["conv.weight"] = initializer({3, 2, 3, 3}, 1);
  g.initializers["conv.bias"] = initializer({3}, 2);
  g.initializers["head.weight"] = initializer({4, 3}, 3);
  g.initializers["head.bias"] = initializer({4}, 4);
  NodeSpec conv = node("Conv", {"x", "conv.weight", "conv.bias"}, {"c"});
  set_ints(conv, "kernel_shape", {3, 3});
  set_ints(conv, "pads", {1, 1, 1, 1});
  g.nodes.push_back(conv);
  g.nodes.push_back(node("Relu", {"c"}, {"r"}));
  g.nodes.push_back(node("GlobalAveragePool", {"r"}, {"p"}));
  g.nodes.push_back(node("Flatten", {"p"}, {"f"}));
  NodeSpec gemm = node("Gemm", {"f", "head.weight", "head.bias"}, {"y"});
  Attribute trans_b;
  trans_b.kind = Attribute::Kind::integer;
  trans_b.i = 1;
  gemm.attributes["transB"] = trans_b;
  g.nodes.push_back(gemm);
  sort_and_check_graph(g);
  return g;
}

// Samples [first, first + count) of the dataset, inputs and targets.
Tensor samples(std::int64_t first, std::int64_t count, int step, bool targets) {
  const Shape one = targets ? Shape{4} : Shape{2, 6, 6};
  const std::size_t per = static_cast<std::size_t>(shape_numel(one));
  std::vector<double> v;
  for (std::int64_t s = first; s < first + count; ++s) {
    const auto sample = pseudo_random(per, 100 + 10 * s + (targets ? 5 : 0) + 1000 * step);
    v.insert(v.end(), sample.begin(), sample.end());
  }
  Shape shape = one;
  shape.insert(shape.begin(), count);
  return Tensor::from_vector(v, shape);
}

// Gradient of the mean squared error over this rank's samples (ddp averages the ranks').
Tensor mse_grad(const Tensor& y, const Tensor& t) {
  const auto yv = y.to_vector<double>();
  const auto tv = t.to_vector<double>();
  std::vector<double> g(yv.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = 2.0 * (yv[i] - tv[i]) / static_cast<double>(g.size());
  return Tensor::from_vector(g, y.shape());
}

std::vector<std::vector<double>> values(OnnxModel& model) {
  std::vector<std::vector<double>> out;
  for (Parameter* p : model.parameters()) out.push_back(p->value.to_vector<double>());
  return out;
}

TEST(OnnxTraining, DdpTracksTheSerialGraphStepByStep) {
  const int ranks = testing::world_size();
  const int rank = testing::world_rank();
  ASSERT_EQ(kSamples % ranks, 0);
  const std::int64_t local = kSamples / ranks;

  // The serial twin: the whole batch on every rank.
  OnnxModel serial(cnn_graph(kSamples));
  AdamW serial_optimizer(serial.named_parameters(), AdamWOptions{.lr = 1e-2});
  std::vector<std::vector<std::vector<double>>> serial_values;
  for (int step = 0; step < kSteps; ++step) {
    serial_optimizer.zero_grad();
    const Tensor y = serial.forward(samples(0, kSamples, step, false));
    serial.backward(mse_grad(y, samples(0, kSamples, step, true)));
    serial_optimizer.step();
    serial_values.push_back(values(serial));
  }

  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  OnnxModel model(cnn_graph(local));
  if (rank != 0) {
    for (Parameter* p : model.parameters()) ops::scale(p->value, 1.5);  // the broadcast must undo it
  }
  // overlap = false: OnnxModel registers its parameters itself, and overlapped ddp and fsdp2
  // wrap the child modules that own parameters (docs/onnx.md, Limits).
  dp::DataParallel data_parallel(model, mesh, DataParallelMode::ddp, dp::DataParallelOptions{.overlap = false});
  AdamW optimizer(model.named_parameters(), AdamWOptions{.lr = 1e-2});
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const Tensor y = model.forward(samples(rank * local, local, step, false));
    model.backward(mse_grad(y, samples(rank * local, local, step, true)));
    data_parallel.finish_gradient_sync();
    optimizer.step();
    const auto got = values(model);
    ASSERT_EQ(got.size(), serial_values[step].size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      for (std::size_t k = 0; k < got[i].size(); ++k) {
        EXPECT_NEAR(got[i][k], serial_values[step][i][k], 1e-12)
            << ranks << " ranks, step " << step << ", parameter " << model.named_parameters()[i].first << "[" << k
            << "]";
      }
    }
  }
  // Training moved the parameters (so tracking is not trivially true).
  const auto first = serial_values.front();
  const auto last = serial_values.back();
  double moved = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    for (std::size_t k = 0; k < first[i].size(); ++k) moved = std::max(moved, std::abs(first[i][k] - last[i][k]));
  }
  EXPECT_GT(moved, 1e-3);

  // A checkpoint of the trained graph and its optimizer, in both layouts, resumes at this
  // rank count and on one rank alone (another layout): the same values, and one more
  // step of the whole batch from it lands where the serial twin's next step does.
  serial_optimizer.zero_grad();
  const Tensor y_serial = serial.forward(samples(0, kSamples, kSteps, false));
  serial.backward(mse_grad(y_serial, samples(0, kSamples, kSteps, true)));
  serial_optimizer.step();
  const auto serial_next = values(serial);
  for (io::CheckpointLayout layout : {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared}) {
    const std::string name(io::checkpoint_layout_name(layout));
    const std::string root = testing::scratch_dir("onnx_" + name);
    io::save_checkpoint(root, mesh, model, &optimizer, io::SaveOptions{.layout = layout, .step = kSteps});
    OnnxModel resumed(cnn_graph(local));
    AdamW resumed_optimizer(resumed.named_parameters(), AdamWOptions{.lr = 1e-2});
    io::load_checkpoint(root, mesh, resumed, &resumed_optimizer);
    EXPECT_EQ(values(resumed), values(model)) << name;
    if (rank != 0) continue;
    Mesh alone(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::ddp, 1, 1});
    OnnxModel single(cnn_graph(kSamples));
    AdamW single_optimizer(single.named_parameters(), AdamWOptions{.lr = 1e-2});
    io::load_checkpoint(root, alone, single, &single_optimizer);
    EXPECT_EQ(values(single), values(model)) << name << ", loaded on one rank";
    single_optimizer.zero_grad();
    const Tensor y = single.forward(samples(0, kSamples, kSteps, false));
    single.backward(mse_grad(y, samples(0, kSamples, kSteps, true)));
    single_optimizer.step();
    const auto got = values(single);
    for (std::size_t i = 0; i < got.size(); ++i) {
      for (std::size_t k = 0; k < got[i].size(); ++k) {
        EXPECT_NEAR(got[i][k], serial_next[i][k], 1e-12) << name << ", the step after the checkpoint";
      }
    }
  }
}

}  // namespace
}  // namespace tessera::onnx::test
