// Checkpoints of a grouped-query decoder across tensor-parallel layouts (4 ranks; meshes
// of 1, 2 and 4 ranks on sub-communicators). With 4 query and 2 key/value heads the k and
// v projections [2 * head_dim, d_model] are column shards at tp 2 (whole key/value heads
// per rank) and tp-replicated at tp 4 (repeated heads): whatever layout wrote the file,
// every rank loads exactly its block of the serial model's masters, the AdamW state
// follows, and training goes on as if it had never stopped.

#include <filesystem>

#include "ckpt_test_util.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/models/decoder.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

models::DecoderConfig gqa_config() {
  models::DecoderConfig c;
  c.vocab = 16;
  c.d_model = 8;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.rope = true;
  c.hidden = 16;
  c.n_layers = 2;
  return c;
}

// The decoder at `tp` (serial when tp has one rank), masters a pure function of the seed.
std::unique_ptr<models::Decoder> make_decoder(Communicator& tp, std::uint64_t seed) {
  auto model = std::make_unique<models::Decoder>(gqa_config());
  nn::initialize_parameters(*model, seed);
  if (tp.size() > 1) (void)models::parallelize_decoder(*model, tp, /*sequence_parallel=*/true);
  return model;
}

const io::CheckpointLayout kLayouts[] = {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared};

}  // namespace

TEST(DecoderGqaCheckpoint, KeyValueProjectionsReshardBetweenSplitAndRepeated) {
  Communicator self(MPI_COMM_SELF);
  for (auto layout : kLayouts) {
    for (int saved_tp : {2, 4, 1}) {
      const std::string name = std::string(io::checkpoint_layout_name(layout)) + "_tp" + std::to_string(saved_tp);
      const std::string root = scratch_dir("gqa_" + name);
      const std::uint64_t seed = 60 + static_cast<std::uint64_t>(saved_tp);
      if (auto mesh = sub_mesh(saved_tp, config(DataParallelMode::none, saved_tp))) {
        auto model = make_decoder(mesh->tp(), seed);
        if (saved_tp == 2) {
          EXPECT_TRUE(model->at("layers.0.attn.k").named_parameters()[0].second->placement.tp.is_shard());
        }
        if (saved_tp == 4) EXPECT_EQ(model->at("layers.0.attn.k").type_name(), "KvHeadsProjection");
        io::SaveOptions o;
        o.layout = layout;
        o.step = 1;
        io::save_checkpoint(root, *mesh, *model, nullptr, o);
      }
      Communicator(MPI_COMM_WORLD).barrier();
      auto serial = make_decoder(self, seed);
      for (int load_tp : {1, 2, 4}) {
        if (auto mesh = sub_mesh(load_tp, config(DataParallelMode::none, load_tp))) {
          auto model = make_decoder(mesh->tp(), seed + 1000);  // other values before the load
          const auto r = io::load_checkpoint(root, *mesh, *model);
          EXPECT_EQ(r.loaded.size(), model->named_parameters().size());
          expect_blocks_of(*model, *serial, name + " -> tp" + std::to_string(load_tp));
        }
        Communicator(MPI_COMM_WORLD).barrier();
      }
    }
  }
}

TEST(DecoderGqaCheckpoint, AdamWStateFollowsFromRepeatedToSplitHeads) {
  const std::string root = scratch_dir("gqa_adamw");
  constexpr std::uint64_t kSeed = 77;
  if (auto mesh = sub_mesh(4, config(DataParallelMode::none, 4))) {
    auto model = make_decoder(mesh->tp(), kSeed);
    AdamW adam(model->named_parameters(), {});
    train(*model, adam, 2);
    io::SaveOptions o;
    o.step = 2;
    io::save_checkpoint(root, *mesh, *model, &adam, o);
  }
  Communicator(MPI_COMM_WORLD).barrier();
  // Gradients that depend only on (step, name, global index): the serial model trained 3
  // steps is the reference for tp 2 trained 2 steps at tp 4 and 1 more after the load.
  Communicator self(MPI_COMM_SELF);
  auto reference = make_decoder(self, kSeed);
  AdamW reference_adam(reference->named_parameters(), {});
  train(*reference, reference_adam, 3);
  if (auto mesh = sub_mesh(2, config(DataParallelMode::none, 2))) {
    auto model = make_decoder(mesh->tp(), kSeed + 1);
    AdamW adam(model->named_parameters(), {});
    io::load_checkpoint(root, *mesh, *model, &adam);
    EXPECT_EQ(adam.step_count(), 2);
    for (auto& [name, p] : model->named_parameters()) p->zero_grad();
    // One more step with the third step's gradients (train() restarts at step 0).
    set_layout_free_grads(*model, 2);
    adam.step();
    expect_blocks_of(*model, *reference, "adamw tp4 -> tp2, one more step");
  }
  Communicator(MPI_COMM_WORLD).barrier();
}
