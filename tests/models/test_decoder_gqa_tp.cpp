// A current decoder (RoPE + grouped-query attention) tensor-parallel against its serial
// twin at tp = 1, 2, 4, with and without sequence parallelism: logits, loss, every
// reassembled gradient, 3 AdamW steps, and the collectives counted on the tp
// communicator. The key/value heads are split over tp where tp divides n_kv_heads and
// repeated otherwise — including layouts where neither of tp and n_kv_heads divides the
// other (6 query / 3 key-value heads at tp 2, 12 / 3 at tp 4).

#include <gtest/gtest.h>

#include "decoder_tp_step.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"

using namespace tessera;
using namespace tessera::testing;  // the decoder step and the comparisons

namespace {

constexpr std::uint64_t kSeed = 2207;
constexpr std::int64_t kVocab = 16;

struct Case {
  const char* name;
  std::int64_t n_heads, d_model, n_kv_heads;
  bool rope;
};

const Case kCases[] = {
    {"h4_kv2_rope", 4, 8, 2, true},     // split at tp 2, repeated at tp 4
    {"h4_kv1", 4, 8, 1, false},         // repeated at tp 2 and 4 (multi-query attention)
    {"h6_kv3_rope", 6, 12, 3, true},    // neither divides at tp 2
    {"h12_kv3_rope", 12, 24, 3, true},  // neither divides at tp 2 or tp 4
};

models::DecoderConfig config_of(const Case& c) {
  models::DecoderConfig a;
  a.vocab = kVocab;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.rope = c.rope;
  a.rope_theta = 100.0;
  a.hidden = 16;
  a.n_layers = 2;
  return a;
}

const DecoderBatch kBatch{2, 4, kVocab};

}  // namespace

TEST(DecoderGqaTp, MatchesSerialTwinForwardBackwardAndSteps) {
  Communicator tp(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  const int T = tp.size();
  const bool multi = T > 1;
  int ran = 0;
  for (const Case& c : kCases) {
    if (c.n_heads % T != 0) continue;  // query heads are split over tp
    for (bool want_sp : {false, true}) {
      const std::string what = std::string(c.name) + (want_sp ? " with sp" : " without sp") + " at tp " +
                               std::to_string(T);
      ++ran;
      const auto config = config_of(c);
      models::Decoder serial(config), parallel(config);
      nn::initialize_parameters(serial, kSeed);
      nn::initialize_parameters(parallel, kSeed);
      const models::DecoderTpPlan plan = models::parallelize_decoder(parallel, tp, want_sp);
      const bool split = c.n_kv_heads % T == 0;
      EXPECT_EQ(plan.kv_heads_split, split) << what;
      EXPECT_EQ(plan.sequence_parallel, want_sp) << what;
      if (multi) {
        EXPECT_EQ(parallel.at("layers.1.attn.k").type_name(), split ? "ColumnParallelLinear" : "KvHeadsProjection")
            << what;
        EXPECT_EQ(parallel.at("layers.0.attn.v").type_name(), split ? "ColumnParallelLinear" : "KvHeadsProjection")
            << what;
        // Repeated heads keep the projection whole on every rank (one copy in checkpoints).
        Parameter& kw = *parallel.at("layers.0.attn.k").named_parameters()[0].second;
        EXPECT_EQ(kw.placement.tp.is_shard(), split) << what;
        EXPECT_EQ(kw.partial_grad_over_tp, !split) << what;
      }

      AdamWOptions options;
      options.lr = 5e-3;
      AdamW serial_opt(serial.named_parameters(), options);
      AdamW parallel_opt(parallel.named_parameters(), options);
      const std::int64_t L = config.n_layers;
      for (int step = 0; step < 3; ++step) {
        serial_opt.zero_grad();
        parallel_opt.zero_grad();
        const DecoderStep s = decoder_step(serial, self, kBatch);
        const DecoderStep p = counted_tp_step(parallel, tp, kBatch);

        EXPECT_NEAR(p.loss, s.loss, 1e-5 * std::abs(s.loss)) << what << " step " << step;
        EXPECT_TRUE(tensors_close(p.logits, tp::split_along(s.logits, -1, tp))) << what << " step " << step;
        if (step == 0) {
          expect_same_parameters(serial, parallel, tp, /*grads=*/true, what + " step 0");
          // Repeated key/value projections communicate exactly as the column-parallel
          // ones they replace (an all-gather of the sequence each way with sp; an
          // input-gradient all-reduce without): the counts of the plain decoder's plan
          // (tests/parallelize/test_models_tp.cpp), and the cross-entropy's 2.
          const std::int64_t fwd = want_sp ? 7 * L + 1 : 2 * L;
          const std::int64_t bwd = want_sp ? 7 * L + 2 : 5 * L + 1;
          EXPECT_EQ(p.forward_calls, multi ? fwd : 0) << what;
          EXPECT_EQ(p.loss_calls, multi ? 2 : 0) << what;
          EXPECT_EQ(p.backward_calls, multi ? bwd : 0) << what;
          // sync: the averaged bucket, plus the summed one (sp's norms, repeated k/v).
          EXPECT_EQ(p.sync_calls, multi ? ((want_sp || !split) ? 2 : 1) : 0) << what;
        }
        serial_opt.step();
        parallel_opt.step();
        expect_same_parameters(serial, parallel, tp, /*grads=*/false, what + " after step " + std::to_string(step));
      }
    }
  }
  EXPECT_EQ(ran, T == 4 ? 6 : 8);  // 6 query heads do not split over 4 ranks
}

TEST(DecoderGqaTp, RepeatedHeadsNeedParallelizeDecoder) {
  // The plan alone leaves repeated k and v serial: the attention refuses the widths and
  // says what to call instead (every rank alike, before any forward collective).
  Communicator tp(MPI_COMM_WORLD);
  if (tp.size() == 1) {
    EXPECT_TRUE(models::decoder_tp_plan(config_of(kCases[1]), false).kv_heads_split);
    return;
  }
  const auto config = config_of(kCases[1]);  // n_kv_heads 1: repeated at tp 2 and 4
  models::Decoder parallel(config);
  nn::initialize_parameters(parallel, kSeed);
  const auto plan = models::decoder_tp_plan(config, /*sequence_parallel=*/false, tp.size());
  EXPECT_FALSE(plan.kv_heads_split);
  tp::parallelize(parallel, tp, plan.plan);
  try {
    (void)parallel.forward(kBatch.ids());
    ADD_FAILURE() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("parallelize_decoder"), std::string::npos) << e.what();
  }
  // And tp must divide n_heads.
  models::DecoderConfig odd = config_of(kCases[2]);  // 6 heads
  if (6 % tp.size() != 0) {
    models::Decoder m(odd);
    EXPECT_THROW((void)models::parallelize_decoder(m, tp, false), InvalidArgument);
  }
}
