// The C trainer with checkpoint.async: true (docs/checkpoint-format.md, "Asynchronous
// saves"): tessera_trainer_save returns once the state is copied, training goes on, and
// tessera_trainer_wait_save commits step 3 (`latest` names it). A fresh trainer restores
// it and repeats steps 4..6 with the same losses, bit for bit, as the trainer that saved
// it and trained on during the background write. MPI_THREAD_MULTIPLE, as the saver needs.
// Runs at 1 and 2 ranks (domain = ranks; 9 latitudes: uneven bands).
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capi_check.hpp"
#include "tessera/tessera.h"

namespace {

constexpr std::int64_t kChannels = 2, kNlat = 9, kNlon = 8, kBatch = 2;

float value(std::int64_t s, std::int64_t c, std::int64_t lat, std::int64_t lon) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(lon + s) + 0.3 * static_cast<double>(c)) *
                            std::cos(0.4 * static_cast<double>(lat) - 0.2 * static_cast<double>(s)));
}

std::vector<float> batch(std::int64_t first, std::int64_t lat0, std::int64_t nlat) {
  std::vector<float> x;
  for (std::int64_t b = 0; b < kBatch; ++b)
    for (std::int64_t c = 0; c < kChannels; ++c)
      for (std::int64_t i = 0; i < nlat; ++i)
        for (std::int64_t j = 0; j < kNlon; ++j) x.push_back(value(first + b, c, lat0 + i, j));
  return x;
}

// Step `step` (1-based) on samples [(step - 1) B, step B) over this rank's band.
double train_step(tessera_trainer_t* t, std::int64_t step) {
  std::int64_t lat0 = 0, nlat = 0, lon0 = 0, nlon = 0;
  EXPECT_STATUS(tessera_trainer_box(t, &lat0, &nlat, &lon0, &nlon), TESSERA_OK);
  const std::vector<float> x = batch((step - 1) * kBatch, lat0, nlat), y = batch((step - 1) * kBatch + 1, lat0, nlat);
  const std::int64_t shape[4] = {kBatch, kChannels, nlat, kNlon};
  double loss = NAN;
  EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, &loss), TESSERA_OK);
  return loss;
}

tessera_trainer_t* create(const std::string& config) {
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &t),
                TESSERA_OK);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &capi_test::world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &capi_test::world_size);
  const std::string dir =
      std::string(argc > 1 ? argv[1] : ".") + "/capi_trainer_async_np" + std::to_string(capi_test::world_size);
  const std::string config = dir + "/async.yaml", root = dir + "/ckpt";
  if (capi_test::world_rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream out(config);
    out << "parallelism:\n  data: none\n  tensor: 1\n  domain: " << capi_test::world_size
        << "\nmodel:\n  width: 6\n  mlp_hidden: 8\n  blocks: 1\n  kernel: 3\n"
        << "optimizer:\n  type: adamw\n  lr: 0.01\n  warmup_steps: 2\n"
        << "schedule:\n  steps: 6\n  seed: 7\n"
        << "data:\n  normalize: false\n"
        << "checkpoint:\n  dir: " << root << "\n  async: true\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);

  tessera_trainer_t* t = create(config);
  std::vector<double> losses;
  for (std::int64_t step = 1; step <= 3; ++step) losses.push_back(train_step(t, step));
  EXPECT_STATUS(tessera_trainer_save(t, nullptr), TESSERA_OK);  // returns after the snapshot
  for (std::int64_t step = 4; step <= 6; ++step) losses.push_back(train_step(t, step));  // during the write
  EXPECT_STATUS(tessera_trainer_wait_save(t), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_wait_save(t), TESSERA_OK);  // nothing in flight: at once
  if (capi_test::world_rank == 0) {
    std::ifstream latest(root + "/latest");
    std::string name;
    std::getline(latest, name);
    CHECK(name == "step_00000003");
  }

  tessera_trainer_t* again = create(config);
  EXPECT_STATUS(tessera_trainer_restore(again, nullptr), TESSERA_OK);
  std::int64_t steps = 0;
  EXPECT_STATUS(tessera_trainer_steps(again, &steps), TESSERA_OK);
  CHECK(steps == 3);
  for (std::int64_t step = 4; step <= 6; ++step) {
    CHECK(train_step(again, step) == losses[static_cast<std::size_t>(step - 1)]);
  }
  // A second asynchronous save, left in flight: destroy waits for it.
  EXPECT_STATUS(tessera_trainer_save(again, nullptr), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&again), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
  if (capi_test::world_rank == 0) CHECK(std::filesystem::exists(root + "/step_00000006/MANIFEST"));
  return capi_test::finish("test_capi_trainer_async");
}
