// parallelize / apply_tensor_parallel / sync_replicated_gradients at tp = 1, 2, 4 on
// small models built from the serial layers, against the serial twin.

#include <gtest/gtest.h>

#include "mpi_test.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"
#include "../tp/tp_test_util.hpp"

using namespace tessera;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;
using tp::ParallelStyle;

namespace {

constexpr std::uint64_t kSeed = 7;

// Sequential{0: Linear(8,16), 1: GELU, 2: Linear(16,8), 3: LayerNorm(8), 4: Linear(8,16), 5: GELU, 6: Linear(16,8)}
std::unique_ptr<nn::Sequential> mlp_stack() {
  auto m = std::make_unique<nn::Sequential>();
  m->append(std::make_unique<nn::Linear>(8, 16));
  m->append(std::make_unique<nn::GELU>());
  m->append(std::make_unique<nn::Linear>(16, 8));
  m->append(std::make_unique<nn::LayerNorm>(8));
  m->append(std::make_unique<nn::Linear>(8, 16));
  m->append(std::make_unique<nn::GELU>());
  m->append(std::make_unique<nn::Linear>(16, 8));
  nn::initialize_parameters(*m, kSeed, "net");
  return m;
}

// Forward + backward of both models on the same data; compares output, dx and every
// reassembled gradient.
void expect_twins(nn::Module& serial, nn::Module& parallel, Communicator& tp, const Tensor& x, const Tensor& dy) {
  EXPECT_TRUE(tensors_close(parallel.forward(x), serial.forward(x)));
  EXPECT_TRUE(tensors_close(parallel.backward(dy), serial.backward(dy)));
  const auto want = serial.named_parameters();
  const auto got = parallel.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(tensors_close(tp::assemble_master(*got[i].second, got[i].second->grad, tp), want[i].second->grad))
        << got[i].first;
  }
}

// An opt-in block (CREDIT style): y = x + mlp(x) with 1x1 convs at dotted paths.
class OptInBlock : public nn::Module {
 public:
  OptInBlock() {
    auto mlp = std::make_unique<nn::Sequential>();
    mlp->append(std::make_unique<nn::Conv2d>(4, 8, 1, 1));
    mlp->append(std::make_unique<nn::GELU>());
    mlp->append(std::make_unique<nn::Conv2d>(8, 4, 1, 1));
    register_child("mlp", std::move(mlp));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = at("mlp").forward(x).clone();
    ops::axpy(1.0, x, y);
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    Tensor dx = at("mlp").backward(dy).clone();
    ops::axpy(1.0, dy, dx);
    return dx;
  }
  std::string type_name() const override { return "OptInBlock"; }
  std::optional<TensorParallelPaths> tensor_parallel_paths() const override { return TensorParallelPaths{"mlp.0", "mlp.2"}; }
};

class Parallelize : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

}  // namespace

TEST_F(Parallelize, ColwiseRowwisePlanMatchesSerialAndCountsCollectives) {
  auto serial = mlp_stack();
  auto parallel = mlp_stack();
  tp::parallelize(*parallel, tp,
                  {{"0", ParallelStyle::colwise()}, {"2", ParallelStyle::rowwise()}, {"3", ParallelStyle::replicated()},
                   {"4", ParallelStyle::colwise()}, {"6", ParallelStyle::rowwise()}});
  EXPECT_EQ(parallel->at("0").type_name(), "ColumnParallelLinear");
  EXPECT_EQ(parallel->at("2").type_name(), "RowParallelLinear");
  EXPECT_EQ(parallel->at("3").type_name(), "LayerNorm");

  const Tensor x = random_tensor({3, 5, 8}, 1);
  const Tensor dy = random_tensor({3, 5, 8}, 2);
  const std::int64_t before = tp.stats().mpi_calls;
  EXPECT_TRUE(tensors_close(parallel->forward(x), serial->forward(x)));
  const std::int64_t forward_collectives = tp.stats().mpi_calls - before;
  EXPECT_TRUE(tensors_close(parallel->backward(dy), serial->backward(dy)));
  const std::int64_t backward_collectives = tp.stats().mpi_calls - before - forward_collectives;
  // One all-reduce per row layer forward, one per column layer backward; none at tp=1.
  EXPECT_EQ(forward_collectives, tp.size() > 1 ? 2 : 0);
  EXPECT_EQ(backward_collectives, tp.size() > 1 ? 2 : 0);
}

TEST_F(Parallelize, PairwiseAndWildcards) {
  auto serial = mlp_stack();
  auto parallel = mlp_stack();
  // Pairwise on the root Sequential: its four Linears become col/row/col/row.
  tp::parallelize(*parallel, tp, {{"", ParallelStyle::pairwise()}});
  EXPECT_EQ(parallel->at("4").type_name(), "ColumnParallelLinear");
  EXPECT_EQ(parallel->at("6").type_name(), "RowParallelLinear");
  expect_twins(*serial, *parallel, tp, random_tensor({4, 8}, 3), random_tensor({4, 8}, 4));

  auto odd = std::make_unique<nn::Sequential>();
  odd->append(std::make_unique<nn::Linear>(4, 4));
  try {
    tp::parallelize(*odd, tp, {{"", ParallelStyle::pairwise()}});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("even number of Linear children, found 1"), std::string::npos) << e.what();
  }
}

TEST_F(Parallelize, BadPlansFailBeforeTouchingTheModel) {
  auto model = mlp_stack();
  auto type_at = [&](const char* path) { return model->at(path).type_name(); };
  // A pattern that matches nothing names the pattern and the style.
  try {
    tp::parallelize(*model, tp, {{"0", ParallelStyle::colwise()}, {"layers.*.q", ParallelStyle::colwise()}});
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pattern 'layers.*.q'"), std::string::npos) << what;
    EXPECT_NE(what.find("Colwise(input=Replicate, output=Shard(features))"), std::string::npos) << what;
  }
  EXPECT_EQ(type_at("0"), "Linear");  // the first, valid entry was not applied
  // A style on a module type it cannot shard names both.
  try {
    tp::parallelize(*model, tp, {{"1", ParallelStyle::rowwise()}});
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Rowwise"), std::string::npos) << what;
    EXPECT_NE(what.find("GELU '1'"), std::string::npos) << what;
  }
  EXPECT_THROW(tp::parallelize(*model, tp, {{"3", ParallelStyle::colwise()}}), InvalidArgument);  // LayerNorm
  EXPECT_THROW(tp::parallelize(*model, tp, {{"0", ParallelStyle::sequence_parallel()}}), InvalidArgument);
  try {
    tp::parallelize(*model, tp, {{"0", ParallelStyle::colwise()}, {"*", ParallelStyle::rowwise()}});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("module '0' is matched by both '0' and '*'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(type_at("0"), "Linear");
  EXPECT_EQ(type_at("6"), "Linear");
}

TEST_F(Parallelize, SequenceParallelMatchesSerial) {
  // x [B, S, D] replicated -> SP norm (Replicate -> Shard(seq)) -> Colwise (all-gather seq)
  // -> GELU -> Rowwise (reduce-scatter seq) -> SP norm -> gathered back for comparison.
  const std::int64_t seq = 4;
  auto build = [] {
    auto m = std::make_unique<nn::Sequential>();
    m->append(std::make_unique<nn::RMSNorm>(8));
    m->append(std::make_unique<nn::Linear>(8, 16));
    m->append(std::make_unique<nn::GELU>());
    m->append(std::make_unique<nn::Linear>(16, 8));
    m->append(std::make_unique<nn::LayerNorm>(8));
    nn::initialize_parameters(*m, kSeed, "sp");
    return m;
  };
  auto serial = build();
  auto parallel = build();
  tp::parallelize(*parallel, tp,
                  {{"0", ParallelStyle::sequence_parallel(tp::Layout::replicate)},
                   {"1", ParallelStyle::colwise(tp::Layout::shard_sequence)},
                   {"3", ParallelStyle::rowwise(tp::Layout::shard_features, tp::Layout::shard_sequence)},
                   {"4", ParallelStyle::sequence_parallel()}});
  EXPECT_EQ(parallel->at("0").type_name(), "SequenceParallel(RMSNorm)");
  EXPECT_EQ(parallel->at("4").type_name(), "SequenceParallel(LayerNorm)");
  // FQNs are unchanged by the wrapper.
  EXPECT_EQ(parallel->named_parameters().front().first, "0.weight");

  const Tensor x = random_tensor({2, seq, 8}, 5);
  const Tensor dy = random_tensor({2, seq, 8}, 6);
  const Tensor y_serial = serial->forward(x);
  const Tensor dx_serial = serial->backward(dy);
  const Tensor y_local = parallel->forward(x);
  EXPECT_EQ(y_local.shape(), (Shape{2, seq / tp.size(), 8}));
  EXPECT_TRUE(tensors_close(y_local, tp::split_along(y_serial, 1, tp)));
  const Tensor dx = parallel->backward(tp::split_along(dy, 1, tp));
  EXPECT_TRUE(tensors_close(dx, dx_serial));
  // Norm weights and the row bias hold partial sums until synchronised.
  tp::sync_replicated_gradients(*parallel, tp);
  const auto want = serial->named_parameters();
  const auto got = parallel->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(tensors_close(tp::assemble_master(*got[i].second, got[i].second->grad, tp), want[i].second->grad))
        << got[i].first;
  }
}

TEST_F(Parallelize, ApplyTensorParallelConvertsOptedInBlocks) {
  auto build = [] {
    auto m = std::make_unique<nn::Sequential>();
    m->append(std::make_unique<OptInBlock>());
    m->append(std::make_unique<OptInBlock>());
    nn::initialize_parameters(*m, kSeed, "field");
    return m;
  };
  auto serial = build();
  auto parallel = build();
  tp::apply_tensor_parallel(*parallel, tp);
  EXPECT_EQ(parallel->at("1.mlp.0").type_name(), "ColumnParallelConv2d");
  EXPECT_EQ(parallel->at("1.mlp.2").type_name(), "RowParallelConv2d");
  expect_twins(*serial, *parallel, tp, random_tensor({2, 4, 3, 5}, 7), random_tensor({2, 4, 3, 5}, 8));
}

// Perturbing one rank's replicated gradients: without sync the replicas drift after an
// optimizer step; with sync they stay bit-identical (and sharded parameters are left
// alone: their gradients differ legitimately between ranks).
TEST_F(Parallelize, SyncReplicatedGradientsPinsReplicas) {
  if (tp.size() == 1) GTEST_SKIP() << "replicas need 2 or more ranks";
  for (bool sync : {false, true}) {
    auto model = mlp_stack();
    tp::parallelize(*model, tp, {{"", ParallelStyle::pairwise()}});
    // SGD: the update is proportional to the gradient, so a perturbation shows (AdamW's
    // first step is sign-like and could hide it).
    SgdOptions sgd;
    sgd.lr = 0.1;
    Sgd optimizer(model->named_parameters(), sgd);
    model->forward(random_tensor({4, 8}, 9));
    model->backward(random_tensor({4, 8}, 10));
    std::map<std::string, Tensor> sharded_before;
    for (auto& [name, p] : model->named_parameters()) {
      if (p->placement.tp.is_shard()) {
        sharded_before[name] = p->grad.clone();
        continue;
      }
      // A nondeterministic kernel on one rank: a tiny rank-dependent perturbation.
      Tensor noise = random_tensor(p->grad.shape(), 100 + tp.rank());
      ops::axpy(1e-3 * (tp.rank() + 1), noise, p->grad);
    }
    if (sync) tp::sync_replicated_gradients(*model, tp, /*bucket_bytes=*/64);  // small buckets: several all-reduces
    optimizer.step();
    for (auto& [name, p] : model->named_parameters()) {
      if (p->placement.tp.is_shard()) {
        EXPECT_TRUE(tensors_close(p->grad, sharded_before[name], 0)) << name << " (sharded) was touched";
        continue;
      }
      // Compare with rank 0's copy, bit for bit.
      Tensor reference = p->value.clone();
      tp.broadcast(reference, 0);
      const bool identical = tensors_close(p->value, reference, 0);
      const bool all_identical = tessera::testing::all_ranks(identical);
      if (sync) {
        EXPECT_TRUE(all_identical) << name << " drifted despite sync";
      } else {
        EXPECT_FALSE(all_identical) << name << " did not drift without sync (the test would prove nothing)";
      }
    }
  }
}
