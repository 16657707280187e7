// Activation checkpointing (issue 22 item 2): a checkpointed block keeps only its input
// and recomputes its forward before its backward, so losses, gradients and weights after
// AdamW steps are bit-identical to the run without it:
//   - the decoder at tp = the world size (1, 2), with sequence parallelism and repeated
//     key/value heads (a KvHeadsProjection), and with tied embeddings; every block
//     (`blocks`) and every second one (`every 2`);
//   - the field emulator at domain = the world size (1, 2), and at tp 2;
//   - under data parallelism (2 ranks: dp 2): ddp with overlap and fsdp2, the blocks
//     checkpointed before DataParallel (each checkpointed block is one unit) and after it
//     (the leaves' reductions wait for finish_gradient_sync), against the same
//     DataParallel model without checkpointing.
// Plus: FQNs unchanged, the block's caches (serial and tensor-parallel layers) really released after forward, the policy's
// parsing and its errors, and backward without forward refused.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mpi_test.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;

namespace {

constexpr std::uint64_t kSeed = 2222;
constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 2, kSeq = 4, kVocab = 16;

// Same bits (not merely close): the recompute is the same computation.
::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  if (std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0) return ::testing::AssertionSuccess();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
    }
  }
  return ::testing::AssertionFailure() << "unreachable";
}

void expect_identical(nn::Module& plain, nn::Module& checkpointed, bool grads, const std::string& what) {
  const auto want = plain.named_parameters();
  const auto got = checkpointed.named_parameters();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;  // FQNs unchanged
    EXPECT_TRUE(identical(grads ? want[i].second->grad : want[i].second->value,
                          grads ? got[i].second->grad : got[i].second->value))
        << what << ": " << (grads ? "grad" : "value") << " of " << got[i].first;
  }
}

// Token ids that differ between dp ranks (so the dp average matters).
Tensor token_ids(int salt) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < kBatch * kSeq; ++i) ids.push_back((7 * i + 3 + 5 * salt) % kVocab);
  return Tensor::from_vector(ids, {kBatch, kSeq});
}

Tensor targets(int salt) {
  std::vector<std::int64_t> t;
  for (std::int64_t i = 0; i < kBatch * kSeq; ++i) t.push_back((5 * i + 1 + salt) % kVocab);
  return Tensor::from_vector(t, {kBatch * kSeq});
}

models::DecoderConfig decoder_config(bool tied, std::int64_t layers) {
  models::DecoderConfig a;
  a.vocab = kVocab;
  a.d_model = 8;
  a.n_heads = 4;
  a.n_kv_heads = tied ? 0 : 1;  // repeated over tp 2: KvHeadsProjection inside the blocks
  a.rope = !tied;
  a.rope_theta = 100.0;
  a.hidden = 16;
  a.n_layers = layers;
  a.tie_embeddings = tied;
  return a;
}

// One step's forward and backward; the loss over `loss_group` (the tp group, or self).
double decoder_step(models::Decoder& model, Communicator& loss_group, int salt, Tensor* logits_out = nullptr) {
  const Tensor logits = model.forward(token_ids(salt));
  const auto ce = tp::vocab_parallel_cross_entropy(logits.reshape({kBatch * kSeq, logits.size(2)}), targets(salt),
                                                   loss_group);
  model.backward(ce.grad_logits.reshape(logits.shape()));
  if (logits_out != nullptr) *logits_out = logits;
  return ce.loss;
}

// A decoder variant of the bit-identity tests: tied or with repeated key/value heads and
// RoPE, sequence parallel or not, every `every`-th block checkpointed (0: none).
struct DecoderVariant {
  bool tied;
  bool sp;
  std::int64_t every;
  std::string name(const Communicator& tp) const {
    return std::string(tied ? "tied" : "gqa+rope") + (sp ? " sp" : "") + ", " + nn::CheckpointPolicy{every}.str() +
           ", tp " + std::to_string(tp.size());
  }
};

// Two decoders with the same master weights, tensor-parallel over `tp`.
models::DecoderTpPlan same_weights_at_tp(models::Decoder& a, models::Decoder& b, Communicator& tp, bool sp) {
  nn::initialize_parameters(a, kSeed);
  nn::initialize_parameters(b, kSeed);
  const auto plan = models::parallelize_decoder(a, tp, sp);
  (void)models::parallelize_decoder(b, tp, sp);
  return plan;
}

}  // namespace

TEST(ActivationCheckpointPolicy, ParsesAndNamesTheKey) {
  EXPECT_EQ(nn::CheckpointPolicy::parse("none", "k").every, 0);
  EXPECT_EQ(nn::CheckpointPolicy::parse("blocks", "k").every, 1);
  EXPECT_EQ(nn::CheckpointPolicy::parse("every 3", "k").every, 3);
  EXPECT_EQ(nn::CheckpointPolicy::parse("every 3", "k").str(), "every 3");
  EXPECT_EQ(nn::CheckpointPolicy{1}.str(), "blocks");
  EXPECT_EQ(nn::CheckpointPolicy{}.str(), "none");
  // every 2 of 5 blocks: blocks 1 and 3.
  const nn::CheckpointPolicy two{2};
  EXPECT_FALSE(two.selects(0));
  EXPECT_TRUE(two.selects(1));
  EXPECT_TRUE(two.selects(3));
  EXPECT_EQ(two.count(5), 2);
  for (const char* bad : {"all", "every", "every 0", "every -1", "every 2x", "every +2", "Blocks", ""}) {
    try {
      (void)nn::CheckpointPolicy::parse(bad, "model.activation_checkpointing");
      ADD_FAILURE() << "expected a ConfigError for '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("model.activation_checkpointing"), std::string::npos) << e.what();
    }
  }
}

TEST(ActivationCheckpoint, ReleasesTheBlockAndRefusesBackwardWithoutForward) {
  models::Decoder model(decoder_config(false, 2));
  nn::initialize_parameters(model, kSeed);
  const auto before = model.named_parameters();
  const auto paths = models::checkpoint_activations(model, nn::CheckpointPolicy{1});
  ASSERT_EQ(paths, (std::vector<std::string>{"layers.0", "layers.1"}));
  EXPECT_EQ(model.at("layers.0").type_name(), "Checkpointed(TransformerBlock)");
  const auto after = model.named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second, before[i].second);
  }
  // Wrapping twice is refused, naming the block.
  try {
    (void)models::checkpoint_activations(model, nn::CheckpointPolicy{1});
    ADD_FAILURE() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0"), std::string::npos) << e.what();
  }
  auto& wrapper = dynamic_cast<nn::ActivationCheckpoint&>(model.at("layers.1"));
  EXPECT_THROW((void)wrapper.backward(Tensor::zeros(Shape{kBatch, kSeq, 8}, DType::f32)), InvalidArgument);
  (void)model.forward(token_ids(0));
  // The block itself kept nothing for its backward: only the wrapper's input remains.
  EXPECT_THROW((void)wrapper.inner().backward(Tensor::zeros(Shape{kBatch, kSeq, 8}, DType::f32)), InvalidArgument);
}

// Every tensor-parallel layer drops its saved input in release_activations(): a backward
// after it is the "backward without a preceding forward" error, not a stale gradient.
TEST(ActivationCheckpoint, TensorParallelLayersReleaseTheirCaches) {
  Communicator tp(MPI_COMM_WORLD);
  const std::int64_t P = tp.size();
  auto expect_released = [](nn::Module& layer, const Tensor& x, const std::string& what) {
    const Tensor y = layer.forward(x);
    layer.release_activations();
    EXPECT_THROW((void)layer.backward(Tensor::zeros(y.shape(), y.dtype())), InvalidArgument) << what;
  };
  tp::ColumnParallelLinear col(4, 2 * P, tp, /*gather_output=*/false);
  expect_released(col, Tensor::zeros(Shape{2, 4}, DType::f32), "ColumnParallelLinear");
  tp::RowParallelLinear row(2 * P, 4, tp, /*input_is_parallel=*/false);
  expect_released(row, Tensor::zeros(Shape{2, 2 * P}, DType::f32), "RowParallelLinear");
  tp::ColumnParallelConv2d col_conv(3, 2 * P, tp);
  expect_released(col_conv, Tensor::zeros(Shape{1, 3, 4, 4}, DType::f32), "ColumnParallelConv2d");
  tp::RowParallelConv2d row_conv(2 * P, 3, tp, /*input_is_parallel=*/true);
  expect_released(row_conv, Tensor::zeros(Shape{1, 2, 4, 4}, DType::f32), "RowParallelConv2d");
  const Tensor ids = Tensor::from_vector<std::int64_t>({0, 1, 2, 3}, {2, 2});
  tp::ParallelEmbedding by_dim(8, 2 * P, tp);
  expect_released(by_dim, ids, "ParallelEmbedding");
  tp::VocabParallelEmbedding by_vocab(4 * P, 4, tp);
  expect_released(by_vocab, ids, "VocabParallelEmbedding");
}

TEST(ActivationCheckpoint, DecoderGradientsAndStepsBitIdenticalAtTp) {
  Communicator tp(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  for (const DecoderVariant& v :
       {DecoderVariant{false, true, 1}, DecoderVariant{false, false, 2}, DecoderVariant{true, false, 1}}) {
    const std::string what = v.name(tp);
    const auto config = decoder_config(v.tied, 3);
    models::Decoder plain(config), checkpointed(config);
    const auto plan = same_weights_at_tp(plain, checkpointed, tp, v.sp);
    const auto paths = models::checkpoint_activations(checkpointed, nn::CheckpointPolicy{v.every});
    EXPECT_EQ(paths.size(), v.every == 1 ? 3u : 1u) << what;
    Communicator& loss_group = plan.vocab_sharded_logits ? tp : self;
    AdamW plain_opt(plain.named_parameters(), AdamWOptions{.lr = 5e-3});
    AdamW checkpointed_opt(checkpointed.named_parameters(), AdamWOptions{.lr = 5e-3});
    for (int step = 0; step < kSteps; ++step) {
      const std::string at = what + " step " + std::to_string(step);
      plain_opt.zero_grad();
      checkpointed_opt.zero_grad();
      Tensor want_logits, got_logits;
      const double want = decoder_step(plain, loss_group, step, &want_logits);
      const double got = decoder_step(checkpointed, loss_group, step, &got_logits);
      EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << at << ": loss " << want << " vs " << got;
      EXPECT_TRUE(identical(want_logits, got_logits)) << at << ": logits";
      tp::sync_replicated_gradients(plain, tp);
      tp::sync_replicated_gradients(checkpointed, tp);
      expect_identical(plain, checkpointed, /*grads=*/true, at);
      plain_opt.step();
      checkpointed_opt.step();
      expect_identical(plain, checkpointed, /*grads=*/false, at + " after the step");
    }
  }
}

namespace {

models::FieldEmulatorConfig emulator_config() {
  models::FieldEmulatorConfig c;
  c.channels = 2;
  c.width = 4;
  c.mlp_hidden = 6;
  c.n_blocks = 3;
  c.kernel = 3;
  c.nlat = 7;  // uneven bands at domain 2
  c.nlon = 8;
  return c;
}

// This rank's band of a deterministic global field [kBatch, channels, nlat, nlon].
Tensor band(const models::FieldEmulator& model, int step) {
  const auto& c = model.config();
  const auto box = model.decomposition().box();
  std::vector<float> v;
  for (std::int64_t b = 0; b < kBatch; ++b) {
    for (std::int64_t ch = 0; ch < c.channels; ++ch) {
      for (std::int64_t i = box.lat.start; i < box.lat.start + box.lat.length; ++i) {
        for (std::int64_t j = 0; j < c.nlon; ++j) {
          v.push_back(static_cast<float>(std::sin(0.3 * (i + 1) + 0.7 * j + 1.1 * ch + 0.5 * b + 0.2 * step)));
        }
      }
    }
  }
  return Tensor::from_vector(v, {kBatch, c.channels, box.lat.length, c.nlon});
}

}  // namespace

TEST(ActivationCheckpoint, FieldEmulatorGradientsAndStepsBitIdenticalAtDomainAndTp) {
  const int world = tessera::testing::world_size();
  std::vector<ParallelismConfig> layouts{{DataParallelMode::none, 1, world}};
  if (world == 2) layouts.push_back({DataParallelMode::none, 2, 1});
  for (const ParallelismConfig& layout : layouts) {
    Mesh mesh(MPI_COMM_WORLD, layout);
    const std::string what = "tp " + std::to_string(mesh.tp_size()) + " x domain " + std::to_string(mesh.domain_size());
    models::FieldEmulator plain(emulator_config(), mesh), checkpointed(emulator_config(), mesh);
    nn::initialize_parameters(plain, kSeed);
    nn::initialize_parameters(checkpointed, kSeed);
    EXPECT_EQ(models::checkpoint_activations(checkpointed, nn::CheckpointPolicy{1}).size(), 3u) << what;
    EXPECT_EQ(checkpointed.at("blocks.2").type_name(), "Checkpointed(ChannelMlpBlock)");
    AdamW plain_opt(plain.named_parameters(), AdamWOptions{.lr = 1e-2});
    AdamW checkpointed_opt(checkpointed.named_parameters(), AdamWOptions{.lr = 1e-2});
    for (int step = 0; step < kSteps; ++step) {
      const std::string at = what + " step " + std::to_string(step);
      plain_opt.zero_grad();
      checkpointed_opt.zero_grad();
      for (models::FieldEmulator* m : {&plain, &checkpointed}) {
        const Tensor y = m->forward(band(*m, step));
        (void)m->backward(y);  // the gradient of 0.5 |y|^2
        tp::sync_replicated_gradients(*m, mesh.tp());
        domain::sync_domain_gradients(*m, mesh);
      }
      expect_identical(plain, checkpointed, /*grads=*/true, at);
      plain_opt.step();
      checkpointed_opt.step();
      expect_identical(plain, checkpointed, /*grads=*/false, at + " after the step");
    }
  }
}

TEST(ActivationCheckpoint, DataParallelDdpOverlapAndFsdp2BitIdentical) {
  // At 1 rank the dp group has one member and DataParallel does nothing (the same
  // models, unwrapped); at 2 ranks: dp 2.
  const bool dp2 = tessera::testing::world_size() == 2;
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  Communicator self(MPI_COMM_SELF);
  const int salt = mesh.coords().dp;
  const auto config = decoder_config(false, 2);
  struct Run {
    std::unique_ptr<models::Decoder> model;
    std::unique_ptr<dp::DataParallel> data_parallel;
    std::unique_ptr<AdamW> optimizer;
  };
  // when: 0 no checkpointing, 1 before DataParallel, 2 after it.
  auto make = [&](DataParallelMode mode, int when) {
    Run r;
    r.model = std::make_unique<models::Decoder>(config);
    nn::initialize_parameters(*r.model, kSeed);
    if (when == 1) (void)models::checkpoint_activations(*r.model, nn::CheckpointPolicy{1});
    r.data_parallel = std::make_unique<dp::DataParallel>(*r.model, mesh, mode, dp::DataParallelOptions{.overlap = true});
    if (when == 2) (void)models::checkpoint_activations(*r.model, nn::CheckpointPolicy{1});
    r.optimizer = std::make_unique<AdamW>(r.model->named_parameters(), AdamWOptions{.lr = 5e-3});
    return r;
  };
  for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    Run plain = make(mode, 0), before = make(mode, 1), after = make(mode, 2);
    const std::string label = std::string(data_parallel_mode_name(mode));
    // Checkpointed before: the block is the unit; after: the leaves stay the units, inside.
    if (dp2) {
      const auto units = before.data_parallel->unit_paths();
      EXPECT_NE(std::find(units.begin(), units.end(), "layers.1"), units.end()) << label;
      EXPECT_EQ(before.model->at("layers.1").type_name(),
                std::string(mode == DataParallelMode::fsdp2 ? "FSDP" : "DDP") + "(Checkpointed(TransformerBlock))");
      EXPECT_FALSE(plain.data_parallel->unit_paths().empty()) << label;
    }
    EXPECT_EQ(after.model->at("layers.1").type_name(), "Checkpointed(TransformerBlock)") << label;
    EXPECT_EQ(plain.data_parallel->unit_paths(), after.data_parallel->unit_paths()) << label;
    for (int step = 0; step < kSteps; ++step) {
      const std::string at = label + " step " + std::to_string(step);
      for (Run* r : {&plain, &before, &after}) {
        r->optimizer->zero_grad();
        (void)decoder_step(*r->model, self, 2 * step + salt);
        r->data_parallel->finish_gradient_sync();
      }
      expect_identical(*plain.model, *before.model, /*grads=*/true, at + " (checkpointed before dp)");
      expect_identical(*plain.model, *after.model, /*grads=*/true, at + " (checkpointed after dp)");
      for (Run* r : {&plain, &before, &after}) r->optimizer->step();
      expect_identical(*plain.model, *before.model, /*grads=*/false, at + " after the step (before dp)");
      expect_identical(*plain.model, *after.model, /*grads=*/false, at + " after the step (after dp)");
    }
  }
}

// Stashing (nn/activations.hpp, the pipeline's default): two microbatches' forwards,
// each one's caches moved aside, then each put back before its backward, give the
// gradients of one forward per backward bit for bit. Every caching layer of the decoder
// takes part: attention with repeated key/value heads (KvHeadsProjection) and RoPE,
// RMSNorm, SwiGLU, the tensor-parallel linears and embeddings, sequence parallelism's
// scatter extents, the tied head's normed output and a checkpointed block's input.
TEST(ActivationStash, TwoForwardsThenTwoBackwardsMatchOneForwardPerBackward) {
  Communicator tp(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  for (const DecoderVariant& v :
       {DecoderVariant{false, true, 0}, DecoderVariant{true, false, 0}, DecoderVariant{false, false, 2}}) {
    const std::string what = v.name(tp);
    const auto config = decoder_config(v.tied, 3);
    models::Decoder plain(config), stashed(config);
    const auto plan = same_weights_at_tp(plain, stashed, tp, v.sp);
    if (v.every > 0) {
      (void)models::checkpoint_activations(plain, nn::CheckpointPolicy{v.every});
      (void)models::checkpoint_activations(stashed, nn::CheckpointPolicy{v.every});
    }
    Communicator& loss_group = plan.vocab_sharded_logits ? tp : self;
    plain.zero_grad();
    stashed.zero_grad();
    for (int salt : {0, 1}) (void)decoder_step(plain, loss_group, salt);

    auto logit_grad = [&](const Tensor& logits, int salt) {
      const auto ce = tp::vocab_parallel_cross_entropy(logits.reshape({kBatch * kSeq, logits.size(2)}),
                                                       targets(salt), loss_group);
      return ce.grad_logits.reshape(logits.shape());
    };
    const Tensor logits0 = stashed.forward(token_ids(0));
    nn::ActivationStash first = stashed.stash_activations();
    EXPECT_GT(first.tensor_count(), 0u) << what;
    const Tensor logits1 = stashed.forward(token_ids(1));
    nn::ActivationStash second = stashed.stash_activations();
    // The tree holds nothing after a stash: a backward now is refused, not stale.
    EXPECT_THROW((void)stashed.backward(logit_grad(logits1, 1)), InvalidArgument) << what;
    stashed.zero_grad();
    stashed.restore_activations(std::move(first));
    stashed.backward(logit_grad(logits0, 0));
    stashed.restore_activations(std::move(second));
    stashed.backward(logit_grad(logits1, 1));
    tp::sync_replicated_gradients(plain, tp);
    tp::sync_replicated_gradients(stashed, tp);
    expect_identical(plain, stashed, /*grads=*/true, what);
  }
}

// A stash restores only into the tree it came from; anything else is an error that
// leaves the tree released, never a mix of two forwards.
TEST(ActivationStash, AStashFromAnotherTreeIsRefused) {
  models::Decoder decoder(decoder_config(false, 2));
  nn::initialize_parameters(decoder, kSeed);
  (void)decoder.forward(token_ids(0));
  nn::ActivationStash stash = decoder.stash_activations();
  nn::Linear other(8, 8);
  nn::initialize_parameters(other, kSeed);
  const Tensor y = other.forward(Tensor::zeros(Shape{2, 8}, DType::f32));
  try {
    other.restore_activations(std::move(stash));
    ADD_FAILURE() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("another module tree"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)other.backward(Tensor::zeros(y.shape(), y.dtype())), InvalidArgument);
}
