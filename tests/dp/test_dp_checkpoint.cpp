// An fsdp2 checkpoint (dp 2 x tp 2 at 4 ranks, dp 2 x tp 2 x domain 2 at 8 ranks:
// parameters sharded over dp on top of tp, replicated over domain; AdamW state sharded
// with them) saved through io::save_checkpoint loads into a serial model and a serial
// AdamW bit-exactly, and back into a fresh fsdp2 model bit-exactly.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "dp_test_util.hpp"
#include "mpi_test.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

struct Fsdp {
  std::unique_ptr<FieldNet> model;
  std::unique_ptr<dp::DataParallel> data_parallel;
  std::unique_ptr<AdamW> optimizer;
};

Fsdp make_fsdp(const Mesh& mesh) {
  Fsdp f;
  f.model = std::make_unique<FieldNet>(&mesh);
  nn::initialize_parameters(*f.model, kSeed);
  tp::apply_tensor_parallel(*f.model, mesh.tp());
  f.data_parallel = std::make_unique<dp::DataParallel>(*f.model, mesh, DataParallelMode::fsdp2);
  f.optimizer = std::make_unique<AdamW>(f.model->named_parameters(), AdamWOptions{.lr = 1e-2});
  return f;
}

std::string scratch_root() {
  std::string root;
  if (world_rank() == 0) {
    root = (std::filesystem::temp_directory_path() / ("tessera_dp_ckpt_" + std::to_string(::getpid()))).string();
  }
  return all_gather_strings(root).front();
}

}  // namespace

TEST(Fsdp2Checkpoint, SavedAtDp2Tp2AndDomainLoadsIntoSerialBitExactly) {
  if (world_size() != 4 && world_size() != 8) GTEST_SKIP() << "runs at 4 (dp 2 x tp 2) or 8 ranks (x domain 2)";
  Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::fsdp2, 2, world_size() / 4});
  Fsdp f = make_fsdp(mesh);
  // Two steps, so values and optimizer state are no longer the initial ones.
  for (int step = 0; step < 2; ++step) {
    const std::vector<std::int64_t> ids = {2 * mesh.coords().dp + step, 2 * mesh.coords().dp + step + 1};
    f.optimizer->zero_grad();
    const Tensor y = f.model->forward(local_rows(stack(ids, false), *f.model));
    f.model->backward(mse_grad(y, local_rows(stack(ids, true), *f.model), static_cast<double>(2 * kOutC * kLat * kLon)));
    f.data_parallel->finish_gradient_sync();
    tp::sync_replicated_gradients(*f.model, mesh.tp());
    domain::sync_domain_gradients(*f.model, mesh);
    f.optimizer->step();
  }
  const std::string root = scratch_root();
  io::save_checkpoint(root, mesh, *f.model, f.optimizer.get(), {.layout = io::CheckpointLayout::shared, .step = 2});

  // Every rank loads the whole checkpoint serially and checks its own blocks.
  {
    Mesh self(MPI_COMM_SELF, {DataParallelMode::none, 1, 1});
    FieldNet serial(nullptr);
    AdamW serial_opt(serial.named_parameters(), {.lr = 1e-2});
    const auto result = io::load_checkpoint(root, self, serial, &serial_opt);
    EXPECT_EQ(result.step, 2);
    EXPECT_EQ(serial_opt.step_count(), 2);
    const auto want = serial.named_parameters();
    const auto got = f.model->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    bool any_dp_sharded = false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Parameter& p = *got[i].second;
      any_dp_sharded = any_dp_sharded || p.placement.dp.is_shard();
      EXPECT_TRUE(bitwise_equal(p.value, block_of(want[i].second->value, p.local_offset, p.value.shape())))
          << got[i].first << " " << p.placement.str();
    }
    EXPECT_TRUE(any_dp_sharded);
    const auto want_state = serial_opt.named_state();
    const auto got_state = f.optimizer->named_state();
    ASSERT_EQ(want_state.size(), got_state.size());
    for (std::size_t i = 0; i < got_state.size(); ++i) {
      ASSERT_EQ(want_state[i].name, got_state[i].name);
      EXPECT_TRUE(bitwise_equal(got_state[i].tensor, block_of(want_state[i].tensor, got_state[i].local_offset,
                                                              got_state[i].tensor.shape())))
          << got_state[i].name;
    }
  }
  // And back into a fresh fsdp2 model at the same layout.
  Fsdp g = make_fsdp(mesh);
  io::load_checkpoint(root, mesh, *g.model, g.optimizer.get());
  const auto a = f.model->named_parameters(), b = g.model->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(a[i].second->value, b[i].second->value)) << a[i].first;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(root);
}
