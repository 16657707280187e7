// Global gradient-norm clipping over a mesh: the norm equals the serial norm of the
// master gradients (shards counted once, replicated copies counted once) at 1, 2 and 4
// ranks, with uneven shards; gradients are scaled by exactly max_norm / (norm + 1e-6)
// only when that is below 1; one collective per call; a failure on one rank is the same
// error on every rank; non-finite norms leave the gradients alone.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test.hpp"
#include "tessera/clip.hpp"
#include "tessera/mesh.hpp"

using namespace tessera;
using tessera::testing::all_ranks;
using tessera::testing::world_rank;
using tessera::testing::world_size;

namespace {

// One parameter of the test model: its master shape, dtype and placement, and its
// master gradient g[k] = sin(1.3 k + seed) * (seed + 1) / 2 over the flat index k.
struct Def {
  std::string name;
  Shape global;
  DType dtype;
  MeshPlacement placement;
  int seed;
};

double master_grad(const Def& d, std::int64_t k) {
  return std::sin(1.3 * static_cast<double>(k) + d.seed) * (d.seed + 1) / 2.0;
}

// The value as stored in the gradient's dtype, read back in double.
double stored(DType dtype, double v) {
  if (dtype == DType::f32) return static_cast<float>(v);
  if (dtype == DType::bf16) return static_cast<float>(bfloat16(static_cast<float>(v)));
  return v;
}

struct Model {
  std::vector<std::unique_ptr<Parameter>> params;
  std::vector<std::pair<std::string, Parameter*>> named;
};

// Each rank's block of every parameter, its gradient filled from the master gradient.
Model build(const std::vector<Def>& defs, const Mesh* mesh) {
  Model m;
  for (const Def& d : defs) {
    Shape local = d.global, offset(d.global.size(), 0);
    if (mesh != nullptr) {
      for (MeshDim md : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
        const Placement& pl = d.placement[md];
        if (!pl.is_shard()) continue;
        const ShardRange r = shard_range(d.global[pl.dim], mesh->size(md), mesh->rank(md));
        local[pl.dim] = r.length;
        offset[pl.dim] = r.start;
      }
    }
    auto p = std::make_unique<Parameter>(Tensor::zeros(local, d.dtype), d.global, d.placement, offset);
    Tensor host = Tensor::empty(local, DType::f64);
    std::vector<double> values(static_cast<std::size_t>(shape_numel(local)));
    // Row-major walk of the local block, mapping to the global flat index.
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::int64_t rest = static_cast<std::int64_t>(i), global_flat = 0, stride = 1;
      for (int dim = static_cast<int>(local.size()) - 1; dim >= 0; --dim) {
        const std::int64_t idx = rest % local[dim] + offset[dim];
        rest /= local[dim];
        global_flat += idx * stride;
        stride *= d.global[dim];
      }
      values[i] = master_grad(d, global_flat);
    }
    if (d.dtype == DType::f64) {
      p->grad.copy_from(Tensor::from_vector<double>(values, local));
    } else if (d.dtype == DType::f32) {
      std::vector<float> f(values.begin(), values.end());
      p->grad.copy_from(Tensor::from_vector<float>(f, local));
    } else {
      std::vector<bfloat16> b;
      for (double v : values) b.emplace_back(static_cast<float>(v));
      p->grad.copy_from(Tensor::from_vector<bfloat16>(b, local));
    }
    m.named.emplace_back(d.name, p.get());
    m.params.push_back(std::move(p));
  }
  return m;
}

// The norm of the master gradients, computed serially from the formula.
double serial_norm(const std::vector<Def>& defs) {
  double total = 0;
  for (const Def& d : defs) {
    for (std::int64_t k = 0; k < shape_numel(d.global); ++k) {
      const double v = stored(d.dtype, master_grad(d, k));
      total += v * v;
    }
  }
  return std::sqrt(total);
}

std::vector<double> grad_values(const Parameter& p) {
  std::vector<double> out;
  if (p.grad.dtype() == DType::f64) return p.grad.to_vector<double>();
  if (p.grad.dtype() == DType::f32) {
    for (float v : p.grad.to_vector<float>()) out.push_back(v);
  } else {
    for (bfloat16 v : p.grad.to_vector<bfloat16>()) out.push_back(static_cast<float>(v));
  }
  return out;
}

MeshPlacement tp_shard(int dim) { return {{}, Placement::shard(dim), {}}; }

// Column-sharded (uneven rows), row-sharded (uneven columns), and replicated parameters
// in f64, f32 and bf16.
std::vector<Def> tp_model() {
  return {{"mlp.up.weight", {7, 3}, DType::f64, tp_shard(0), 0},
          {"mlp.up.bias", {7}, DType::f32, tp_shard(0), 1},
          {"mlp.down.weight", {4, 9}, DType::f32, tp_shard(1), 2},
          {"mlp.down.bias", {5}, DType::f64, {}, 3},
          {"norm.weight", {6}, DType::bf16, {}, 4}};
}

ParallelismConfig tp_config() { return {DataParallelMode::none, world_size(), 1}; }

}  // namespace

TEST(ClipGradNorm, NormCountsShardsAndReplicasOnceWithOneCollective) {
  Mesh mesh(MPI_COMM_WORLD, tp_config());
  const auto defs = tp_model();
  Model m = build(defs, &mesh);
  const double want = serial_norm(defs);
  const std::int64_t before = mesh.world().stats().collectives;
  const double norm = global_grad_norm(m.named, mesh);
  EXPECT_EQ(mesh.world().stats().collectives - before, 1);
  EXPECT_NEAR(norm, want, 1e-13 * want);
  // Every rank got the same bits.
  double mine = norm, max = 0, min = 0;
  MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(max, min);
}

TEST(ClipGradNorm, BelowMaxNormLeavesGradientsUntouched) {
  Mesh mesh(MPI_COMM_WORLD, tp_config());
  const auto defs = tp_model();
  Model m = build(defs, &mesh);
  const double want = serial_norm(defs);
  std::vector<std::vector<double>> before;
  for (auto& [name, p] : m.named) before.push_back(grad_values(*p));
  const double norm = clip_grad_norm(m.named, 2 * want, mesh);
  EXPECT_NEAR(norm, want, 1e-13 * want);
  for (std::size_t i = 0; i < m.named.size(); ++i) EXPECT_EQ(grad_values(*m.named[i].second), before[i]) << m.named[i].first;
}

TEST(ClipGradNorm, AboveMaxNormScalesEveryGradientExactly) {
  Mesh mesh(MPI_COMM_WORLD, tp_config());
  const auto defs = tp_model();
  Model m = build(defs, &mesh);
  const double want = serial_norm(defs);
  const double max_norm = want / 4;
  std::vector<std::vector<double>> before;
  for (auto& [name, p] : m.named) before.push_back(grad_values(*p));
  const std::int64_t collectives = mesh.world().stats().collectives;
  const double norm = clip_grad_norm(m.named, max_norm, mesh);
  EXPECT_EQ(mesh.world().stats().collectives - collectives, 1);
  EXPECT_NEAR(norm, want, 1e-13 * want);
  const double coef = max_norm / (norm + 1e-6);  // PyTorch's clip coefficient
  for (std::size_t i = 0; i < m.named.size(); ++i) {
    const DType dtype = m.named[i].second->grad.dtype();
    const auto after = grad_values(*m.named[i].second);
    for (std::size_t k = 0; k < after.size(); ++k) {
      EXPECT_EQ(after[k], stored(dtype, before[i][k] * coef)) << m.named[i].first << " element " << k;
    }
  }
  // The clipped gradients have (up to bf16 rounding of one small parameter) norm max_norm.
  EXPECT_NEAR(global_grad_norm(m.named, mesh), max_norm, 2e-3 * max_norm);
}

TEST(ClipGradNorm, DataParallelAndTensorParallelReplicasCountOnce) {
  if (world_size() < 2) GTEST_SKIP() << "needs a data-parallel dimension";
  // dp = 2 replicas of a tp = world/2 model; one fsdp2-style parameter sharded over both.
  Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::fsdp2, world_size() / 2, 1});
  const std::vector<Def> defs = {
      {"blocks.0.attn.qkv.weight", {9, 5}, DType::f64, tp_shard(0), 5},  // replicated over dp
      {"blocks.0.attn.proj.weight", {5, 7}, DType::f32, {Placement::shard(0), Placement::shard(1), {}}, 6},
      {"blocks.0.norm.weight", {5}, DType::f64, {}, 7},  // replicated over dp and tp
  };
  Model m = build(defs, &mesh);
  const double want = serial_norm(defs);
  EXPECT_NEAR(clip_grad_norm(m.named, 1e9, mesh), want, 1e-13 * want);
}

TEST(ClipGradNorm, FailureOnOneRankIsTheSameErrorEverywhere) {
  Mesh mesh(MPI_COMM_WORLD, tp_config());
  Model m = build(tp_model(), &mesh);
  if (world_rank() == world_size() - 1) m.named[2].second->grad = Tensor();
  std::string message;
  try {
    clip_grad_norm(m.named, 1.0, mesh);
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("mlp.down.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("on rank " + std::to_string(world_size() - 1)), std::string::npos) << message;
  // The communicator is still usable afterwards.
  Model ok = build(tp_model(), &mesh);
  EXPECT_GT(global_grad_norm(ok.named, mesh), 0.0);

  for (double bad : {-1.0, std::numeric_limits<double>::infinity()}) {
    try {
      clip_grad_norm(ok.named, bad, mesh);
      ADD_FAILURE() << "max_norm " << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("max_norm"), std::string::npos) << e.what();
    }
  }
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedAndGradientsAreLeftAlone) {
  Mesh mesh(MPI_COMM_WORLD, tp_config());
  for (double poison : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    Model m = build(tp_model(), &mesh);
    if (world_rank() == 0) m.named[3].second->grad.data<double>()[1] = poison;
    std::vector<std::vector<double>> before;
    for (auto& [name, p] : m.named) before.push_back(grad_values(*p));
    const double norm = clip_grad_norm(m.named, 1e-3, mesh);
    if (std::isnan(poison)) {
      EXPECT_TRUE(std::isnan(norm));
    } else {
      EXPECT_EQ(norm, poison);
    }
    for (std::size_t i = 0; i < m.named.size(); ++i) {
      const auto after = grad_values(*m.named[i].second);
      for (std::size_t k = 0; k < after.size(); ++k) {
        const bool same = after[k] == before[i][k] || (std::isnan(after[k]) && std::isnan(before[i][k]));
        EXPECT_TRUE(same) << m.named[i].first << " element " << k;
      }
    }
  }
}

TEST(ClipGradNorm, SerialOverloadNeedsWholeTensors) {
  // No communication: each rank clips its own whole (replicated) tensors.
  const std::vector<Def> defs = {{"a.weight", {3, 4}, DType::f64, {}, 8}, {"a.bias", {4}, DType::f32, {}, 9}};
  Model m = build(defs, nullptr);
  const double want = serial_norm(defs);
  EXPECT_NEAR(global_grad_norm(m.named), want, 1e-14 * want);
  const auto before = grad_values(*m.named[0].second);
  const double norm = clip_grad_norm(m.named, want / 2);
  EXPECT_NEAR(norm, want, 1e-14 * want);
  const auto after = grad_values(*m.named[0].second);
  for (std::size_t k = 0; k < after.size(); ++k) EXPECT_EQ(after[k], before[k] * (want / 2 / (norm + 1e-6)));

  Parameter shard(Tensor::zeros({2, 4}, DType::f64), {3, 4}, tp_shard(0), {1, 0});
  try {
    clip_grad_norm({{"b.weight", &shard}}, 1.0);
    ADD_FAILURE() << "a shard was accepted without a mesh";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("b.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(clip_grad_norm(m.named, -2.0), InvalidArgument);
}
