// The reference models, tensor-parallel against serial at tp = 1, 2, 4: the decoder with
// and without sequence parallelism (loss, logits, every reassembled gradient, 5 AdamW
// steps, collective counts) and the CREDIT-style channel-MLP model converted through
// its opt-in paths.

#include <gtest/gtest.h>

#include "tessera/models/channel_mlp.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"
#include "decoder_tp_step.hpp"

using namespace tessera;
using namespace tessera::testing;  // the decoder step and the comparisons

namespace {

constexpr std::uint64_t kSeed = 4242;

models::DecoderConfig small_config(bool tied = false) {
  models::DecoderConfig c;
  c.vocab = 16;
  c.d_model = 8;
  c.n_heads = 4;
  c.hidden = 16;
  c.n_layers = 2;
  c.tie_embeddings = tied;
  return c;
}

const DecoderBatch kBatch{2, 4, 16};

class ModelsTp : public ::testing::TestWithParam<bool> {
 protected:
  Communicator tp{MPI_COMM_WORLD};
  Communicator self{MPI_COMM_SELF};
};

}  // namespace

TEST_P(ModelsTp, DecoderMatchesSerialAndTrainsInStep) {
  const bool want_sp = GetParam();
  const auto config = small_config();
  models::Decoder serial(config), parallel(config);
  nn::initialize_parameters(serial, kSeed);
  nn::initialize_parameters(parallel, kSeed);
  const auto plan = models::decoder_tp_plan(config, want_sp);
  ASSERT_EQ(plan.sequence_parallel, want_sp);
  tp::parallelize(parallel, tp, plan.plan);
  EXPECT_EQ(parallel.at("layers.1.attn.q").type_name(), "ColumnParallelLinear");
  EXPECT_EQ(parallel.at("head").type_name(), "ColumnParallelLinear");
  EXPECT_EQ(parallel.at("layers.0.attn_norm").type_name(), want_sp ? "SequenceParallel(RMSNorm)" : "RMSNorm");
  EXPECT_EQ(parallel.at("embed").type_name(), want_sp ? "SequenceSharded(Embedding)" : "Embedding");

  AdamWOptions options;
  options.lr = 5e-3;
  AdamW serial_opt(serial.named_parameters(), options);
  AdamW parallel_opt(parallel.named_parameters(), options);
  const std::int64_t layers = config.n_layers;
  const bool multi = tp.size() > 1;

  for (int step = 0; step < 5; ++step) {
    serial_opt.zero_grad();
    parallel_opt.zero_grad();
    const DecoderStep s = decoder_step(serial, self, kBatch);
    const DecoderStep p = counted_tp_step(parallel, tp, kBatch);

    EXPECT_NEAR(p.loss, s.loss, 1e-5 * std::abs(s.loss)) << "step " << step;
    EXPECT_TRUE(tensors_close(p.logits, tp::split_along(s.logits, -1, tp))) << "step " << step;
    if (step == 0) {
      expect_same_parameters(serial, parallel, tp, /*grads=*/true, "step 0");
      // Collectives, counted through the tp communicator (none at tp = 1).
      // Without SP, per block: forward o + down all-reduce (2); backward q, k, v, gate,
      // up input-gradient all-reduces (5); the head adds one backward all-reduce.
      // With SP, per block: forward q, k, v, gate, up all-gathers + o, down
      // reduce-scatters (7); backward the mirror images (7); the head adds one each
      // way and the Replicate -> Shard split after the embedding one backward all-gather.
      const std::int64_t fwd = want_sp ? 7 * layers + 1 : 2 * layers;
      const std::int64_t bwd = want_sp ? 7 * layers + 2 : 5 * layers + 1;
      EXPECT_EQ(p.forward_calls, multi ? fwd : 0);
      EXPECT_EQ(p.loss_calls, multi ? 2 : 0);  // cross-entropy: MAX, then SUM
      EXPECT_EQ(p.backward_calls, multi ? bwd : 0);
      // sync: one bucket of averaged replicated grads, and with SP one of summed partials.
      EXPECT_EQ(p.sync_calls, multi ? (want_sp ? 2 : 1) : 0);
    }
    serial_opt.step();
    parallel_opt.step();
    expect_same_parameters(serial, parallel, tp, /*grads=*/false, "after step " + std::to_string(step));
  }
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, ModelsTp, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "with_sp" : "without_sp"; });

TEST(ModelsTpPlan, TiedEmbeddingsSwitchSequenceParallelismOffWithAReason) {
  Communicator tp(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  const auto config = small_config(/*tied=*/true);
  const auto plan = models::decoder_tp_plan(config, /*sequence_parallel=*/true);
  EXPECT_FALSE(plan.sequence_parallel);
  EXPECT_NE(plan.reason.find("tied"), std::string::npos) << plan.reason;
  EXPECT_FALSE(plan.vocab_sharded_logits);
  models::Decoder serial(config), parallel(config);
  nn::initialize_parameters(serial, kSeed);
  nn::initialize_parameters(parallel, kSeed);
  tp::parallelize(parallel, tp, plan.plan);
  EXPECT_EQ(parallel.find("head"), nullptr);
  const DecoderStep s = decoder_step(serial, self, kBatch);
  // Replicated logits: the loss is computed serially on every rank.
  const DecoderStep p = decoder_step(parallel, self, kBatch);
  tp::sync_replicated_gradients(parallel, tp);
  EXPECT_NEAR(p.loss, s.loss, 1e-5 * std::abs(s.loss));
  EXPECT_TRUE(tensors_close(p.logits, s.logits));
  expect_same_parameters(serial, parallel, tp, /*grads=*/true, "tied");
  EXPECT_TRUE(models::decoder_tp_plan(small_config(), true).reason.empty());
}

TEST(ModelsTpPlan, ChannelMlpThroughOptInPathsMatchesSerialAndTrains) {
  Communicator tp(MPI_COMM_WORLD);
  models::ChannelMlpModel serial(4, 8, 2), parallel(4, 8, 2);
  nn::initialize_parameters(serial, kSeed, "emulator");
  nn::initialize_parameters(parallel, kSeed, "emulator");
  tp::apply_tensor_parallel(parallel, tp);
  EXPECT_EQ(parallel.at("blocks.1.mlp.0").type_name(), "ColumnParallelConv2d");
  EXPECT_EQ(parallel.at("blocks.1.mlp.2").type_name(), "RowParallelConv2d");

  AdamWOptions options;
  options.lr = 1e-2;
  AdamW serial_opt(serial.named_parameters(), options);
  AdamW parallel_opt(parallel.named_parameters(), options);
  const Tensor x = random_tensor({2, 4, 3, 5}, 71);
  const Tensor target = random_tensor({2, 4, 3, 5}, 72);
  auto mse = [&](const Tensor& y, Tensor& dy) {
    dy = y.clone();
    ops::axpy(-1.0, target, dy);
    const double loss = 0.5 * ops::dot(dy, dy) / static_cast<double>(dy.numel());
    ops::scale(dy, 1.0 / static_cast<double>(dy.numel()));
    return loss;
  };
  for (int step = 0; step < 5; ++step) {
    serial_opt.zero_grad();
    parallel_opt.zero_grad();
    Tensor dy_serial, dy_parallel;
    const double ls = mse(serial.forward(x), dy_serial);
    const std::int64_t c0 = tp.stats().mpi_calls;
    const double lp = mse(parallel.forward(x), dy_parallel);
    const std::int64_t c1 = tp.stats().mpi_calls;
    const Tensor dx = parallel.backward(dy_parallel);
    const std::int64_t c2 = tp.stats().mpi_calls;
    EXPECT_TRUE(tensors_close(dx, serial.backward(dy_serial))) << "step " << step;
    EXPECT_NEAR(lp, ls, 1e-5 * ls) << "step " << step;
    if (step == 0) {
      EXPECT_EQ(c1 - c0, tp.size() > 1 ? 2 : 0);  // one row all-reduce per block
      EXPECT_EQ(c2 - c1, tp.size() > 1 ? 2 : 0);  // one column input-gradient all-reduce per block
    }
    tp::sync_replicated_gradients(parallel, tp);
    if (step == 0) expect_same_parameters(serial, parallel, tp, /*grads=*/true, "channel-mlp step 0");
    serial_opt.step();
    parallel_opt.step();
    expect_same_parameters(serial, parallel, tp, /*grads=*/false, "channel-mlp after step " + std::to_string(step));
  }
}
