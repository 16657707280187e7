// Resharding on load (4 ranks; meshes of 1, 2 and 4 ranks on sub-communicators):
// whatever layout wrote a checkpoint, every rank ends with exactly the block of the
// serial model's master weights that its current placement needs, byte for byte.

#include <filesystem>

#include "ckpt_test_util.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/tp/sharding.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

const io::CheckpointLayout kLayouts[] = {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared};

std::string layout_name(io::CheckpointLayout l) { return std::string(io::checkpoint_layout_name(l)); }

// Each parameter of `model` equals its block of the serial twin's master (seed `seed`).
void expect_blocks_of_serial(nn::Module& model, std::uint64_t seed, const std::string& where) {
  expect_blocks_of(model, *make_serial_model(seed), where);
}

void save_on(int ranks, ParallelismConfig cfg, const std::string& root, io::CheckpointLayout layout, std::uint64_t seed) {
  if (auto mesh = sub_mesh(ranks, cfg)) {
    auto model = make_model(mesh->tp(), seed);
    io::SaveOptions o;
    o.layout = layout;
    o.step = 1;
    io::save_checkpoint(root, *mesh, *model, nullptr, o);
  }
  Communicator(MPI_COMM_WORLD).barrier();
}

void load_on(int ranks, ParallelismConfig cfg, const std::string& root, std::uint64_t seed, const std::string& where) {
  if (auto mesh = sub_mesh(ranks, cfg)) {
    auto model = make_model(mesh->tp(), seed + 1000);  // different values before the load
    const auto r = io::load_checkpoint(root, *mesh, *model);
    EXPECT_EQ(r.loaded.size(), 6u);
    expect_blocks_of_serial(*model, seed, where);
  }
  Communicator(MPI_COMM_WORLD).barrier();
}

}  // namespace

TEST(CheckpointReshard, Tp2LoadsAtTp1AndTp4) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir("tp2_" + layout_name(layout));
    save_on(2, config(DataParallelMode::none, 2), root, layout, 21);
    load_on(1, config(DataParallelMode::none, 1), root, 21, layout_name(layout) + " tp2 -> tp1");
    load_on(4, config(DataParallelMode::none, 4), root, 21, layout_name(layout) + " tp2 -> tp4");
  }
}

TEST(CheckpointReshard, DataParallelAndDomainChanges) {
  // ddp dp 2 x tp 2 (per_rank) -> tp 2 alone, and tp 4.
  std::string root = scratch_dir("dp2tp2");
  save_on(4, config(DataParallelMode::ddp, 2), root, io::CheckpointLayout::per_rank, 31);
  load_on(2, config(DataParallelMode::none, 2), root, 31, "ddp dp2 x tp2 -> tp2");
  load_on(4, config(DataParallelMode::none, 4), root, 31, "ddp dp2 x tp2 -> tp4");
  // ddp dp 2 x domain 2 (shared) -> ddp dp 2 x tp 2 and serial.
  root = scratch_dir("dp2dom2");
  save_on(4, config(DataParallelMode::ddp, 1, 2), root, io::CheckpointLayout::shared, 41);
  load_on(4, config(DataParallelMode::ddp, 2), root, 41, "ddp dp2 x domain2 -> ddp dp2 x tp2");
  load_on(1, config(DataParallelMode::none, 1), root, 41, "ddp dp2 x domain2 -> serial");
}

TEST(CheckpointReshard, AdamWStateReshardsFromTp2ToTp4) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir("adamw_" + layout_name(layout));
    if (auto mesh = sub_mesh(2, config(DataParallelMode::none, 2))) {
      auto model = make_model(mesh->tp(), 5);
      AdamW adam(model->named_parameters(), {});
      train(*model, adam, 3);
      io::SaveOptions o;
      o.layout = layout;
      o.step = 3;
      io::save_checkpoint(root, *mesh, *model, &adam, o);
    }
    Communicator(MPI_COMM_WORLD).barrier();
    // The gradients depend only on (step, name, global index), so a tp=4 run trained
    // the same way holds the reference state bit for bit.
    Mesh mesh(MPI_COMM_WORLD, config(DataParallelMode::none, 4));
    auto reference = make_model(mesh.tp(), 5);
    AdamW reference_adam(reference->named_parameters(), {});
    train(*reference, reference_adam, 3);

    auto model = make_model(mesh.tp(), 6);
    AdamW adam(model->named_parameters(), {});
    io::load_checkpoint(root, mesh, *model, &adam);
    EXPECT_EQ(adam.step_count(), 3);
    auto got = adam.named_state(), want = reference_adam.named_state();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(same_bytes(got[i].tensor, want[i].tensor)) << layout_name(layout) << " " << got[i].name;
    }
    auto p = model->named_parameters(), r = reference->named_parameters();
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, r[i].second->value));
  }
}
