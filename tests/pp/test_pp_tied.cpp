// A decoder with tied embeddings (its head reads the embedding's table) trained through
// the pipeline, as a models::DecoderChain whose head is a TiedHead, against the serial
// Decoder: after every step the loss (the same on every rank), every gradient the stage
// holds (embed.weight's with the head's share added, from whichever stage the head is
// on) and every weight after the AdamW step equal the serial model's to fp32 rounding;
// so does evaluate afterwards. The stage holding the embedding checkpoints its table
// once, under its serial FQN: the checkpoint loads into the serial tied Decoder, and a
// serial checkpoint loads back into the pipeline, whose next step (the head's replica
// refreshed from the loaded table) still equals the serial one. A refused batch before
// the first step leaves nothing of the tie in flight.
//
// At 1 rank: pipeline 1 (the head reads the table itself). At 2 ranks: pipeline 2 (embed
// and the blocks on stage 0, norm and head on stage 1). At 4 ranks: pipeline 4 (embed
// alone on stage 0, norm and head on stage 3); pipeline
// 2 x tp 2 (the table stays whole over tp); pipeline 2 x dp 2 under ddp (the table's
// gradient is averaged over dp with the head's share in it).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "mpi_test.hpp"
#include "pp_test_util.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder_chain.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/cross_entropy.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr std::uint64_t kSeed = 6161;
constexpr std::int64_t kBatch = 8, kSeq = 4, kVocab = 16;
constexpr int kSteps = 3;

models::DecoderConfig tied_config() {
  models::DecoderConfig c;
  c.vocab = kVocab;
  c.d_model = 8;
  c.n_heads = 2;
  c.hidden = 16;
  c.n_layers = 2;
  c.tie_embeddings = true;
  return c;
}

struct Layout {
  ParallelismConfig config;
  std::string name;
  std::vector<int> units_per_stage;  // empty: the even split
};

std::vector<Layout> layouts() {
  if (world_size() == 1) return {{{DataParallelMode::none, 1, 1, 1}, "pipeline 1"}};
  if (world_size() == 2) return {{{DataParallelMode::none, 1, 1, 2}, "pipeline 2"}};
  // Pipeline 4 keeps norm with the head: a stage holding only the tied head would hold
  // no parameter, which an optimizer refuses (tessera-run refuses such a split).
  return {{{DataParallelMode::none, 1, 1, 4}, "pipeline 4", {1, 1, 1, 2}},
          {{DataParallelMode::none, 2, 1, 2}, "pipeline 2 x tp 2"},
          {{DataParallelMode::ddp, 1, 1, 2}, "pipeline 2 x dp 2 (ddp)"}};
}

// kBatch * kSeq token ids in [0, kVocab), the same on every rank.
std::vector<std::int64_t> tokens(std::uint64_t salt) {
  std::vector<std::int64_t> ids(kBatch * kSeq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((pseudo_random(salt, i) + 1.0) * 0.5 * kVocab) % kVocab;
  }
  return ids;
}
// Step `step`'s ids [kBatch, kSeq] and next-token targets [kBatch * kSeq].
Tensor batch_ids(int step) { return Tensor::from_vector(tokens(800 + static_cast<std::uint64_t>(step)), {kBatch, kSeq}); }
Tensor batch_targets(int step) {
  return Tensor::from_vector(tokens(900 + static_cast<std::uint64_t>(step)), {kBatch * kSeq});
}

// The mean cross-entropy of logits [rows, kSeq, vocab] (whole on every rank: the head is
// tied) against `targets`, its gradient scaled by `share`.
double cross_entropy(const Tensor& logits, const Tensor& targets, double share, Tensor& grad) {
  Communicator self(MPI_COMM_SELF);
  const Shape shape = logits.shape();
  const tp::CrossEntropyResult ce =
      tp::vocab_parallel_cross_entropy(logits.reshape({shape[0] * shape[1], shape[2]}), targets, self);
  grad = ce.grad_logits.reshape(shape);
  ops::scale(grad, share);
  return ce.loss * share;
}

// The serial tied decoder, trained step by step.
struct Serial {
  models::Decoder model{tied_config()};
  std::unique_ptr<AdamW> optimizer;
  Serial() {
    nn::initialize_parameters(model, kSeed);
    optimizer = std::make_unique<AdamW>(model.named_parameters(), AdamWOptions{.lr = 1e-2});
  }
  double step(int s) {
    optimizer->zero_grad();
    Tensor grad;
    const double loss = cross_entropy(model.forward(batch_ids(s)), batch_targets(s), 1.0, grad);
    model.backward(grad);
    optimizer->step();
    return loss;
  }
};

// The tied decoder at `layout`: its chain, pipeline, data parallelism and optimizer.
struct Pipelined {
  Mesh mesh;
  models::Decoder decoder{tied_config()};
  std::unique_ptr<models::DecoderChain> chain;
  std::unique_ptr<pp::Pipeline> pipeline;
  std::unique_ptr<dp::DataParallel> ddp;
  std::unique_ptr<AdamW> optimizer;

  Pipelined(MPI_Comm comm, const Layout& layout) : mesh(comm, layout.config) {
    if (mesh.tp_size() > 1) models::parallelize_decoder(decoder, mesh.tp(), /*sequence_parallel=*/false);
    chain = std::make_unique<models::DecoderChain>(decoder);
    pp::PipelineOptions options;
    options.microbatches = 2;
    options.units_per_stage = layout.units_per_stage;
    options.tied = chain->pipeline_ties();
    pipeline = std::make_unique<pp::Pipeline>(*chain, mesh, options);
    nn::initialize_parameters(*chain, kSeed);
    // Without overlap, as tessera-run runs ddp under a pipeline (docs/pipeline.md, Limits).
    if (mesh.dp_size() > 1) {
      ddp = std::make_unique<dp::DataParallel>(*chain, mesh, dp::DataParallelOptions{.overlap = false});
    }
    optimizer = std::make_unique<AdamW>(chain->named_parameters(), AdamWOptions{.lr = 1e-2});
  }

  // This replica's rows of step `s`'s batch.
  Tensor local(const Tensor& t, std::int64_t row_elements) const {
    const std::int64_t rows = kBatch / mesh.dp_size();
    return t.narrow(0, rows * mesh.coords().dp * row_elements, rows * row_elements).contiguous();
  }

  // One step up to the synchronised gradients; returns the replicas' mean loss.
  double forward_backward(int s) {
    optimizer->zero_grad();
    const Tensor ids = local(batch_ids(s), 1), targets = local(batch_targets(s), kSeq);
    const double loss = pipeline->train_step(pipeline->is_first() ? ids : Tensor(),
                                             [&](const Tensor& logits, const pp::Microbatch& mb, Tensor& grad) {
                                               const double share = static_cast<double>(mb.end - mb.begin) /
                                                                    static_cast<double>(mb.batch_rows);
                                               return cross_entropy(
                                                   logits, targets.narrow(0, mb.begin * kSeq, (mb.end - mb.begin) * kSeq),
                                                   share, grad);
                                             });
    if (ddp) ddp->finish_gradient_sync();
    if (mesh.tp_size() > 1) tp::sync_replicated_gradients(*chain, mesh.tp());
    return mean_over_dp(loss);
  }

  double evaluate(int s) {
    const Tensor ids = local(batch_ids(s), 1), targets = local(batch_targets(s), kSeq);
    const double loss = pipeline->evaluate(pipeline->is_first() ? ids : Tensor(),
                                           [&](const Tensor& logits, const pp::Microbatch& mb) {
                                             const double share = static_cast<double>(mb.end - mb.begin) /
                                                                  static_cast<double>(mb.batch_rows);
                                             Tensor unused;
                                             return cross_entropy(
                                                 logits, targets.narrow(0, mb.begin * kSeq, (mb.end - mb.begin) * kSeq),
                                                 share, unused);
                                           });
    return mean_over_dp(loss);
  }

  double mean_over_dp(double loss) {
    Tensor mean = Tensor::from_vector<double>({loss}, {1});
    mesh.dp().all_reduce(mean, ReduceOp::avg);
    return mean.to_vector<double>()[0];
  }
};

}  // namespace

TEST(PipelineTiedEmbeddings, TrainsLikeTheSerialDecoderAndCheckpointsTheTableOnce) {
  for (const Layout& layout : layouts()) {
    SCOPED_TRACE(layout.name);
    Serial serial;
    Pipelined pipelined(MPI_COMM_WORLD, layout);
    const bool holds_embed = pipelined.chain->at("embed").named_parameters().size() == 1;
    // The table is a parameter of the embedding's stage only; the head owns none.
    EXPECT_EQ(pipelined.chain->at("head").named_parameters().size(), 0u);
    // The head's stage without the table keeps a replica of it (whole: a tied table stays
    // a serial Embedding under tp) and the replica's gradient; no other stage keeps any.
    const auto& units = pipelined.pipeline->units();
    const bool holds_head = std::find(units.begin(), units.end(), "head") != units.end();
    std::int64_t table_bytes = 0;
    for (const auto& [name, p] : serial.model.named_parameters()) {
      if (name == "embed.weight") table_bytes = static_cast<std::int64_t>(p->value.nbytes());
    }
    ASSERT_GT(table_bytes, 0);
    const pp::TiedReplicaBytes replica = pipelined.pipeline->tied_replica_bytes();
    EXPECT_EQ(replica.values, holds_head && !holds_embed ? table_bytes : 0);
    EXPECT_EQ(replica.gradients, replica.values);
    if (pipelined.ddp) {
      const auto tied = pipelined.ddp->tied_parameters();
      EXPECT_EQ(tied.size(), holds_embed ? 1u : 0u) << "embed.weight must be reduced after the head's share";
    }

    // A batch stage 0 refuses (1 row for 2 microbatches) raises on every stage and leaves
    // none of the tie's messages (the table's value is already on its way) in flight.
    EXPECT_THROW((void)pipelined.pipeline->train_step(
                     pipelined.pipeline->is_first() ? batch_ids(0).narrow(0, 0, 1).contiguous() : Tensor(),
                     [](const Tensor&, const pp::Microbatch&, Tensor&) { return 0.0; }),
                 InvalidArgument);

    for (int s = 0; s < kSteps; ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      // The serial model's gradients of this step, before its optimizer step.
      serial.optimizer->zero_grad();
      Tensor grad;
      const double serial_loss = cross_entropy(serial.model.forward(batch_ids(s)), batch_targets(s), 1.0, grad);
      serial.model.backward(grad);

      const double loss = pipelined.forward_backward(s);
      EXPECT_NEAR(loss, serial_loss, 1e-5 * std::abs(serial_loss));
      expect_stage_matches(serial.model, *pipelined.chain, true, layout.name + " (gradients)");
      serial.optimizer->step();
      pipelined.optimizer->step();
      expect_stage_matches(serial.model, *pipelined.chain, false, layout.name + " (weights)");
    }
    // Forward only, with the table the last step left: read through the head's replica.
    Tensor unused;
    const double serial_eval = cross_entropy(serial.model.forward(batch_ids(7)), batch_targets(7), 1.0, unused);
    EXPECT_NEAR(pipelined.evaluate(7), serial_eval, 1e-5 * std::abs(serial_eval));

    // Saved at the pipeline: the serial Decoder's parameters, each once.
    const std::string root = scratch_dir("tied_trained");
    io::SaveOptions save;
    save.step = kSteps;
    io::save_checkpoint(root, pipelined.mesh, *pipelined.chain, pipelined.optimizer.get(), save);
    {
      Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1, 1});
      models::Decoder loaded(tied_config());
      const io::LoadResult result = io::load_checkpoint(root, self, loaded);
      EXPECT_TRUE(result.missing.empty() && result.unexpected.empty());
      expect_stage_matches(serial.model, loaded, false, layout.name + ", loaded serially");
    }
    // A serial checkpoint loads into a fresh pipeline, whose next step is the serial one.
    const std::string serial_root = scratch_dir("tied_serial");
    if (world_rank() == 0) {
      Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1, 1});
      io::save_checkpoint(serial_root, self, serial.model, serial.optimizer.get(), save);
    }
    Communicator(MPI_COMM_WORLD).barrier();
    Pipelined resumed(MPI_COMM_WORLD, layout);
    (void)io::load_checkpoint(serial_root, resumed.mesh, *resumed.chain, resumed.optimizer.get());
    const double serial_next = serial.step(kSteps);
    const double loss = resumed.forward_backward(kSteps);
    resumed.optimizer->step();
    EXPECT_NEAR(loss, serial_next, 1e-5 * std::abs(serial_next)) << "the head read a stale table after the load";
    expect_stage_matches(serial.model, *resumed.chain, false, layout.name + " (weights after a step from the load)");
  }
}

// The tie is checked against the split before anything is sent, on every rank alike.
TEST(PipelineTiedEmbeddings, ATieNamingNoParameterOrNoReaderIsRefused) {
  const ParallelismConfig config{DataParallelMode::none, 1, 1, world_size() == 4 ? 4 : world_size()};
  Mesh mesh(MPI_COMM_WORLD, config);
  struct Case {
    pp::TiedParameter tie;
    std::string expected;
  };
  for (const Case& c : {Case{{"embed.table", "head"}, "the model has no parameter of that name"},
                        Case{{"embed.weight", "layers"}, "the reader is not a unit of the split"},
                        Case{{"embed.weight", "norm"}, "the reader is a RMSNorm, not a pp::ParameterReader"},
                        Case{{"nowhere.weight", "head"}, "no unit of the split"}}) {
    models::Decoder decoder(tied_config());
    models::DecoderChain chain(decoder);
    pp::PipelineOptions options;
    options.tied = {c.tie};
    try {
      pp::Pipeline pipeline(chain, mesh, options);
      ADD_FAILURE() << "no error for " << c.tie.parameter << " read by " << c.tie.reader;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + c.tie.parameter + "' read by '" + c.tie.reader + "'"),
                std::string::npos)
          << e.what();
    }
  }
}
