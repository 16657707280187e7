// The C trainer (tessera_trainer_*) replaying what tessera-run trains on, for
// check_trainer_against_run.py: the raw f32 [time, channel, lat, lon] states of the
// HDF5 file tessera-run reads, passed as f64 fields in physical units with the file's
// per-channel mean and std (data.normalize), optimizer.accumulate micro-batches per
// step. Sample order as tessera-run's with data.shuffle false and lead 1: dp replica r's
// micro-batch i holds samples r + dp (i B + j), j < B (B the local batch), each sample t
// the input of target t + 1. Writes each step's loss (the mean of its micro-batches'
// losses, as tessera-run logs it) to LOSSES on rank 0.
//
// Usage: trainer_replay CONFIG STATES.bin TIMES CHANNELS NLAT NLON STEPS LOCAL_BATCH STATS LOSSES
// STATS: a text file of the channels' means, then their stds.

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace {

void ok(int status, const char* what) {
  if (status != TESSERA_OK) {
    std::fprintf(stderr, "trainer_replay: %s: %s\n", what, tessera_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 11) {
    std::fprintf(stderr, "usage: %s CONFIG STATES.bin TIMES CHANNELS NLAT NLON STEPS LOCAL_BATCH STATS LOSSES\n",
                 argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::int64_t times = std::atoll(argv[3]), channels = std::atoll(argv[4]), nlat = std::atoll(argv[5]),
                     nlon = std::atoll(argv[6]), steps = std::atoll(argv[7]), batch = std::atoll(argv[8]);
  std::vector<float> states(static_cast<std::size_t>(times * channels * nlat * nlon));
  std::ifstream(argv[2], std::ios::binary).read(reinterpret_cast<char*>(states.data()),
                                                static_cast<std::streamsize>(states.size() * sizeof(float)));
  std::vector<double> mean(static_cast<std::size_t>(channels)), std(mean);
  std::ifstream stats(argv[9]);
  for (double& m : mean) stats >> m;
  for (double& s : std) stats >> s;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  tessera_trainer_t* t = nullptr;
  ok(tessera_trainer_create_normalized(argv[1], MPI_COMM_WORLD, channels, nlat, nlon, TESSERA_LATITUDES_CELL_CENTRES,
                                       mean.data(), std.data(), &t),
     "tessera_trainer_create_normalized");
  int sizes[3], coords[3];
  ok(tessera_trainer_mesh(t, sizes, coords), "tessera_trainer_mesh");
  std::int64_t lat0 = 0, lat_count = 0, lon0 = 0, lon_count = 0;
  ok(tessera_trainer_box(t, &lat0, &lat_count, &lon0, &lon_count), "tessera_trainer_box");
  // Sample s's band, as f64: x[B][C][lat_count][nlon].
  const auto band = [&](std::int64_t s, std::vector<double>& out) {
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t i = 0; i < lat_count; ++i)
        for (std::int64_t j = 0; j < nlon; ++j)
          out.push_back(states[static_cast<std::size_t>(((s * channels + c) * nlat + lat0 + i) * nlon + j)]);
  };
  const std::int64_t shape[4] = {batch, channels, lat_count, nlon};
  std::int64_t micro_batches = 0;  // optimizer.accumulate: the calls until the step count moves
  double sum = 0;                  // of their losses
  std::FILE* out = rank == 0 ? std::fopen(argv[10], "w") : nullptr;
  for (std::int64_t i = 0, step = 0; step < steps; ++i) {
    std::vector<double> x, y;
    for (std::int64_t j = 0; j < batch; ++j) {
      const std::int64_t s = coords[0] + sizes[0] * (i * batch + j);
      band(s, x);
      band(s + 1, y);
    }
    double loss = 0;
    ok(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F64, TESSERA_ORDER_C, 4, shape, &loss),
       "tessera_trainer_step");
    sum += loss;
    ++micro_batches;
    std::int64_t now = 0;
    ok(tessera_trainer_steps(t, &now), "tessera_trainer_steps");
    if (now != step) {
      step = now;
      if (out) std::fprintf(out, "%lld %.17g\n", static_cast<long long>(step), sum / static_cast<double>(micro_batches));
      sum = 0;
      micro_batches = 0;
    }
  }
  if (out) std::fclose(out);
  ok(tessera_trainer_destroy(&t), "tessera_trainer_destroy");
  MPI_Finalize();
  return 0;
}
