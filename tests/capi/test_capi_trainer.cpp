// The C API's online training (tessera_trainer_*), against its serial twin: the same
// trainer on MPI_COMM_SELF, one rank, layout 1 x 1 x 1, trained on the whole grid and the
// whole global batch (every dp replica's samples). At every dp x tp x domain layout the
// world size allows, the parallel loss curve and the prediction after training must match
// the serial ones (float reductions in another order: relative 1e-5). Restart: save after
// 3 steps, 3 more steps; a new trainer restores the save and its 3 steps give the same
// losses and prediction bit for bit. The trainer's checkpoint runs in tessera_model_load
// with the same prediction bit for bit. At every layout too: f64 fields of the same
// values train bit for bit as the f32 ones (f32 -> f64 is exact) and predict into f64;
// optimizer.accumulate 2 over 2 micro-batches per step matches the serial twin trained
// on one batch twice as large (relative 1e-5), with the weights unchanged between the
// micro-batches; data.normalize with a per-channel mean and std, on physical f64
// fields, matches the un-normalised trainer fed the normalised fields (what tessera-run
// trains on), predictions in physical units, and the checkpoint's tessera_model_predict
// gives the trainer's prediction bit for bit. Error paths: wrong dtype, a shape off the
// band, B = 0, replicas with different B, a micro-batch of another B, a save between
// micro-batches, data.normalize without statistics or statistics without it, a bad std,
// ranks with different statistics, a decoder, an unknown key, restoring another
// architecture or other statistics, NULL handles. The caller's latitudes: check_latitudes.
// Runs at 1, 2 and 4 ranks (9 latitudes: uneven bands).

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "capi_check.hpp"

namespace {

using capi_test::failures;
using capi_test::world_rank;

constexpr std::int64_t kChannels = 2, kNlat = 9, kNlon = 8, kBatch = 2, kSteps = 6;

// The config of every layout: only the parallelism differs (and for the error cases one key).
std::string write_config(const std::string& dir, const std::string& name, int dp, int tp, int domain,
                         const std::string& extra = "", int accumulate = 1, bool normalize = false) {
  const std::string path = dir + "/" + name + ".yaml";
  if (world_rank == 0) {
    std::ofstream out(path);
    out << "parallelism:\n  data: " << (dp > 1 ? "ddp" : "none") << "\n  tensor: " << tp << "\n  domain: " << domain
        << "\nmodel:\n  width: 6\n  mlp_hidden: 8\n  blocks: 1\n  kernel: 3\n"
        << "optimizer:\n  type: adamw\n  lr: 0.01\n  clip_grad_norm: 1.0\n  warmup_steps: 2\n  accumulate: "
        << accumulate << "\n"
        << "schedule:\n  steps: 6\n  seed: 7\n"
        << "data:\n  normalize: " << (normalize ? "true" : "false") << "\n"
        << "checkpoint:\n  dir: " << dir << "/" << name << "_ckpt\n"
        << extra;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Sample s's field at (channel, global lat, lon): a smooth wave that moves with s.
float value(std::int64_t s, std::int64_t c, std::int64_t lat, std::int64_t lon) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(lon + s) + 0.3 * static_cast<double>(c)) *
                            std::cos(0.4 * static_cast<double>(lat) - 0.2 * static_cast<double>(s)));
}

// Samples [first, first + count) over latitudes [lat0, lat0 + nlat): float x[B][C][lat][lon].
std::vector<float> batch(std::int64_t first, std::int64_t count, std::int64_t lat0, std::int64_t nlat) {
  std::vector<float> x;
  for (std::int64_t b = 0; b < count; ++b)
    for (std::int64_t c = 0; c < kChannels; ++c)
      for (std::int64_t i = 0; i < nlat; ++i)
        for (std::int64_t j = 0; j < kNlon; ++j) x.push_back(value(first + b, c, lat0 + i, j));
  return x;
}

struct Run {
  std::vector<double> losses;
  std::vector<float> prediction;  // of sample 100 over this rank's band (the whole grid serially)
};

// One tessera_trainer_step on samples [first, first + count) over latitudes [lat0, lat0 +
// nlat), their successors as targets; returns the loss.
double step_on(tessera_trainer_t* t, std::int64_t first, std::int64_t count, std::int64_t lat0, std::int64_t nlat) {
  const std::vector<float> x = batch(first, count, lat0, nlat), y = batch(first + 1, count, lat0, nlat);
  const std::int64_t shape[4] = {count, kChannels, nlat, kNlon};
  double loss = NAN;
  EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, &loss),
                TESSERA_OK);
  return loss;
}

// Step `step` (1-based) trains on input samples [(step-1) G, step G) and their
// successors as targets, G the global batch; this replica's share is its dp coordinate's.
double train_step(tessera_trainer_t* t, std::int64_t step, int dp, int dp_rank, std::int64_t lat0,
                  std::int64_t nlat) {
  return step_on(t, (step - 1) * kBatch * dp + dp_rank * kBatch, kBatch, lat0, nlat);
}

// The largest difference between this rank's band [lat0, lat0 + nlat) of a prediction and
// the serial twin's over the whole grid.
double band_difference(const std::vector<float>& band, const std::vector<float>& whole, std::int64_t lat0,
                       std::int64_t nlat) {
  double worst = 0;
  for (std::size_t i = 0; i < band.size(); ++i) {
    const std::int64_t per_channel = nlat * kNlon, c = static_cast<std::int64_t>(i) / per_channel,
                       rest = static_cast<std::int64_t>(i) % per_channel;
    const float serial_value = whole[static_cast<std::size_t>(c * kNlat * kNlon + lat0 * kNlon + rest)];
    worst = std::max(worst, static_cast<double>(std::fabs(band[i] - serial_value)));
  }
  return worst;
}

std::vector<float> predict(tessera_trainer_t* t, std::int64_t lat0, std::int64_t nlat) {
  std::vector<float> x = batch(100, 1, lat0, nlat);
  const std::int64_t shape[3] = {kChannels, nlat, kNlon};
  EXPECT_STATUS(tessera_trainer_predict(t, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 3, shape), TESSERA_OK);
  return x;
}

// The serial twin: the whole grid, the global batch, on this rank alone.
Run serial(const std::string& dir, const std::string& name, int dp) {
  Run r;
  const std::string config = write_config(dir, name + "_serial", 1, 1, 1);
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_SELF, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &t),
                TESSERA_OK);
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    r.losses.push_back(step_on(t, (step - 1) * kBatch * dp, kBatch * dp, 0, kNlat));
  }
  r.prediction = predict(t, 0, kNlat);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
  return r;
}

bool close(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::max(std::fabs(b), 1e-3); }

tessera_trainer_t* create(const std::string& config, MPI_Comm comm, const double* mean = nullptr,
                          const double* std = nullptr) {
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create_normalized(config.c_str(), comm, kChannels, kNlat, kNlon,
                                                  TESSERA_LATITUDES_CELL_CENTRES, mean, std, &t),
                TESSERA_OK);
  return t;
}

// The statistics of data.normalize, far from 0 and 1 as a climate code's are (a
// temperature in K, a small tendency).
constexpr double kMean[kChannels] = {280.0, -3.0}, kStd[kChannels] = {15.0, 0.5};

// x[B][C][lat][lon] as f64 fields: `physical` gives mean + std x per channel, the fields
// whose normalisation is x; otherwise the same values (f32 -> f64 is exact).
std::vector<double> as_f64(const std::vector<float>& x, std::int64_t nlat, bool physical) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / (nlat * kNlon)) % kChannels);
    out[i] = physical ? kMean[c] + kStd[c] * static_cast<double>(x[i]) : static_cast<double>(x[i]);
  }
  return out;
}

// f64 fields and data.normalize at one layout, against `parallel` (the f32 trainer of
// the same config and samples, un-normalised).
void check_f64_and_normalize(const std::string& dir, const std::string& name, int dp, int tp, int domain,
                             int dp_rank, std::int64_t lat0, std::int64_t nlat, const Run& parallel) {
  for (const bool normalize : {false, true}) {
    const std::string config = write_config(dir, name + (normalize ? "_norm" : "_f64"), dp, tp, domain, "", 1,
                                            normalize);
    tessera_trainer_t* t = normalize ? create(config, MPI_COMM_WORLD, kMean, kStd) : create(config, MPI_COMM_WORLD);
    const std::int64_t shape[4] = {kBatch, kChannels, nlat, kNlon};
    double worst_loss = 0;
    for (std::int64_t step = 1; step <= kSteps; ++step) {
      const std::int64_t first = (step - 1) * kBatch * dp + dp_rank * kBatch;
      const std::vector<double> x = as_f64(batch(first, kBatch, lat0, nlat), nlat, normalize);
      const std::vector<double> y = as_f64(batch(first + 1, kBatch, lat0, nlat), nlat, normalize);
      double loss = NAN;
      EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F64, TESSERA_ORDER_C, 4, shape, &loss),
                    TESSERA_OK);
      const double expected = parallel.losses[static_cast<std::size_t>(step - 1)];
      worst_loss = std::max(worst_loss, std::fabs(loss - expected) / expected);
      // f64 of f32 values: the same f32 numbers, so the same training bit for bit. Normalised:
      // the fields round to f32 in physical units first, so their normalisation is x to
      // about 280 / 15 f32 ulps.
      CHECK(normalize ? close(loss, expected, 1e-5) : loss == expected);
    }
    std::vector<double> p = as_f64(batch(100, 1, lat0, nlat), nlat, normalize);
    const std::int64_t one[3] = {kChannels, nlat, kNlon};
    EXPECT_STATUS(tessera_trainer_predict(t, p.data(), p.data(), TESSERA_F64, TESSERA_ORDER_C, 3, one), TESSERA_OK);
    const std::vector<double> expected = as_f64(parallel.prediction, nlat, normalize);  // physical units
    double worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / (nlat * kNlon)) % kChannels);
      worst = std::max(worst, std::fabs(p[i] - expected[i]) / (normalize ? kStd[c] : 1.0));
    }
    CHECK(normalize ? worst <= 1e-5 : worst == 0);
    if (normalize) {
      // The statistics travel with the checkpoint: tessera_model_predict takes physical fields.
      EXPECT_STATUS(tessera_trainer_save(t, nullptr), TESSERA_OK);
      std::vector<float> xf(p.size()), a(p.size()), b(p.size());
      const std::vector<double> xd = as_f64(batch(100, 1, lat0, nlat), nlat, true);
      for (std::size_t i = 0; i < xd.size(); ++i) xf[i] = static_cast<float>(xd[i]);
      EXPECT_STATUS(tessera_trainer_predict(t, xf.data(), a.data(), TESSERA_F32, TESSERA_ORDER_C, 3, one), TESSERA_OK);
      tessera_mesh_t* mesh = nullptr;
      EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, dp > 1 ? TESSERA_DATA_DDP : TESSERA_DATA_NONE, tp, domain,
                                        &mesh),
                    TESSERA_OK);
      tessera_model_t* model = nullptr;
      EXPECT_STATUS(tessera_model_load(mesh, (dir + "/" + name + "_norm_ckpt").c_str(), &model), TESSERA_OK);
      EXPECT_STATUS(tessera_model_predict(model, xf.data(), b.data(), TESSERA_F32, TESSERA_ORDER_C, 3, one),
                    TESSERA_OK);
      CHECK(a == b);
      EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
      EXPECT_STATUS(tessera_mesh_destroy(&mesh), TESSERA_OK);
    }
    if (world_rank == 0) {
      std::printf("%s %s: losses within %.1e of f32 un-normalised, prediction within %.1e%s\n", name.c_str(),
                  normalize ? "normalised f64" : "f64", worst_loss, worst, normalize ? " std" : "");
    }
    EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
  }
}

// optimizer.accumulate 2: step k's two micro-batches of B samples per replica are the
// serial twin's one batch of the 2 G samples [(k-1) 2G, k 2G), G = B dp.
void check_accumulate(const std::string& dir, const std::string& name, int dp, int tp, int domain, int dp_rank,
                      std::int64_t lat0, std::int64_t nlat) {
  constexpr std::int64_t kMicro = 2;
  const std::int64_t global = kBatch * dp;
  tessera_trainer_t* t = create(write_config(dir, name + "_acc", dp, tp, domain, "", kMicro), MPI_COMM_WORLD);
  tessera_trainer_t* serial = create(write_config(dir, name + "_acc_serial", 1, 1, 1), MPI_COMM_SELF);
  const std::int64_t shape[4] = {kBatch, kChannels, nlat, kNlon};
  double worst = 0;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    double loss = 0;
    for (std::int64_t micro = 0; micro < kMicro; ++micro) {
      std::int64_t pending = -1, steps = -1;
      EXPECT_STATUS(tessera_trainer_pending(t, &pending), TESSERA_OK);
      CHECK(pending == micro);
      const std::vector<float> before = predict(t, lat0, nlat);
      const std::int64_t first = (step - 1) * kMicro * global + micro * global + dp_rank * kBatch;
      const std::vector<float> x = batch(first, kBatch, lat0, nlat), y = batch(first + 1, kBatch, lat0, nlat);
      if (step == 1 && micro == 1) {
        // Between micro-batches: another B and a save are refused on every rank, and change nothing.
        const std::int64_t fewer[4] = {kBatch - 1, kChannels, nlat, kNlon};
        EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, fewer, nullptr),
                      TESSERA_ERR_SHAPE);
        CHECK(std::string(tessera_last_error()).find("micro-batch 2 of 2") != std::string::npos);
        EXPECT_STATUS(tessera_trainer_save(t, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
        CHECK(std::string(tessera_last_error()).find("optimizer.accumulate") != std::string::npos);
      }
      double micro_loss = NAN;
      EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, &micro_loss),
                    TESSERA_OK);
      loss += micro_loss / kMicro;
      EXPECT_STATUS(tessera_trainer_steps(t, &steps), TESSERA_OK);
      CHECK(steps == (micro + 1 == kMicro ? step : step - 1));
      // The weights change on the last micro-batch only.
      CHECK((predict(t, lat0, nlat) == before) == (micro + 1 < kMicro));
    }
    const double reference = step_on(serial, (step - 1) * kMicro * global, kMicro * global, 0, kNlat);
    worst = std::max(worst, std::fabs(loss - reference) / reference);
    CHECK(close(loss, reference, 1e-5));
  }
  const double worst_prediction = band_difference(predict(t, lat0, nlat), predict(serial, 0, kNlat), lat0, nlat);
  CHECK(worst_prediction <= 1e-5);
  if (world_rank == 0) {
    std::printf("%s accumulate %lld: step losses within %.1e of one batch of %lld, prediction within %.1e\n",
                name.c_str(), static_cast<long long>(kMicro), worst, static_cast<long long>(kMicro * global),
                worst_prediction);
  }
  EXPECT_STATUS(tessera_trainer_destroy(&serial), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
}

void check_layout(const std::string& dir, int dp, int tp, int domain) {
  const std::string name = "dp" + std::to_string(dp) + "_tp" + std::to_string(tp) + "_dom" + std::to_string(domain);
  const std::string config = write_config(dir, name, dp, tp, domain);
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &t),
                TESSERA_OK);
  int sizes[3] = {0, 0, 0}, coords[3] = {-1, -1, -1};
  EXPECT_STATUS(tessera_trainer_mesh(t, sizes, coords), TESSERA_OK);
  CHECK(sizes[0] == dp && sizes[1] == tp && sizes[2] == domain);
  std::int64_t lat0 = -1, nlat = -1, lon0 = -1, nlon = -1;
  EXPECT_STATUS(tessera_trainer_box(t, &lat0, &nlat, &lon0, &nlon), TESSERA_OK);
  CHECK(lon0 == 0 && nlon == kNlon && nlat >= 1);

  Run parallel;
  for (std::int64_t step = 1; step <= 3; ++step) parallel.losses.push_back(train_step(t, step, dp, coords[0], lat0, nlat));
  EXPECT_STATUS(tessera_trainer_save(t, nullptr), TESSERA_OK);
  for (std::int64_t step = 4; step <= kSteps; ++step) {
    parallel.losses.push_back(train_step(t, step, dp, coords[0], lat0, nlat));
  }
  parallel.prediction = predict(t, lat0, nlat);
  std::int64_t steps = 0;
  EXPECT_STATUS(tessera_trainer_steps(t, &steps), TESSERA_OK);
  CHECK(steps == kSteps);

  // The serial twin: losses and this rank's band of the prediction.
  const Run reference = serial(dir, name, dp);
  for (std::size_t i = 0; i < reference.losses.size(); ++i) {
    if (!close(parallel.losses[i], reference.losses[i], 1e-5)) {
      std::fprintf(stderr, "[rank %d] %s step %zu: loss %.9e, serial %.9e\n", world_rank, name.c_str(), i + 1,
                   parallel.losses[i], reference.losses[i]);
      CHECK(false);
    }
  }
  CHECK(reference.losses.back() < reference.losses.front());  // it learns
  const double worst = band_difference(parallel.prediction, reference.prediction, lat0, nlat);
  CHECK(worst <= 1e-5);
  check_f64_and_normalize(dir, name, dp, tp, domain, coords[0], lat0, nlat, parallel);
  check_accumulate(dir, name, dp, tp, domain, coords[0], lat0, nlat);

  // Restart: a fresh trainer restores step 3 and repeats steps 4..6 bit for bit.
  tessera_trainer_t* again = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &again),
                TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_restore(again, nullptr), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_steps(again, &steps), TESSERA_OK);
  CHECK(steps == 3);
  for (std::int64_t step = 4; step <= kSteps; ++step) {
    CHECK(train_step(again, step, dp, coords[0], lat0, nlat) == parallel.losses[static_cast<std::size_t>(step - 1)]);
  }
  CHECK(predict(again, lat0, nlat) == parallel.prediction);

  // The trainer's checkpoint is an ordinary model checkpoint (saved at step 6 now).
  EXPECT_STATUS(tessera_trainer_save(again, nullptr), TESSERA_OK);
  tessera_mesh_t* mesh = nullptr;
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, dp > 1 ? TESSERA_DATA_DDP : TESSERA_DATA_NONE, tp, domain, &mesh),
                TESSERA_OK);
  tessera_model_t* model = nullptr;
  EXPECT_STATUS(tessera_model_load(mesh, (dir + "/" + name + "_ckpt").c_str(), &model), TESSERA_OK);
  std::vector<float> x = batch(100, 1, lat0, nlat);
  const std::int64_t shape[3] = {kChannels, nlat, kNlon};
  EXPECT_STATUS(tessera_model_forward(model, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 3, shape), TESSERA_OK);
  CHECK(x == parallel.prediction);
  EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
  EXPECT_STATUS(tessera_mesh_destroy(&mesh), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&again), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
  CHECK(t == nullptr);
  if (world_rank == 0) {
    std::printf("%s: losses %.6e .. %.6e (serial %.6e .. %.6e), prediction within %.1e; restart bit-identical\n",
                name.c_str(), parallel.losses.front(), parallel.losses.back(), reference.losses.front(),
                reference.losses.back(), worst);
  }
}

void check_errors(const std::string& dir, int world_size) {
  const std::string config = write_config(dir, "errors", 1, 1, world_size);
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &t),
                TESSERA_OK);
  std::int64_t lat0 = 0, nlat = 0, lon0 = 0, nlon = 0;
  EXPECT_STATUS(tessera_trainer_box(t, &lat0, &nlat, &lon0, &nlon), TESSERA_OK);
  std::vector<float> x = batch(0, 2, lat0, nlat);
  std::int64_t shape[4] = {2, kChannels, nlat, kNlon};
  EXPECT_STATUS(tessera_trainer_step(t, x.data(), x.data(), static_cast<tessera_dtype_t>(2), TESSERA_ORDER_C, 4,
                                     shape, nullptr),
                TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(std::string(tessera_last_error()).find("dtype") != std::string::npos);
  // Off the band on rank 0 only: every rank returns the error.
  std::int64_t off[4] = {2, kChannels, world_rank == 0 ? nlat + 1 : nlat, kNlon};
  std::vector<float> big = batch(0, 2, lat0, nlat + 1);
  EXPECT_STATUS(tessera_trainer_step(t, big.data(), big.data(), TESSERA_F32, TESSERA_ORDER_C, 4, off, nullptr),
                TESSERA_ERR_SHAPE);
  std::int64_t empty[4] = {0, kChannels, nlat, kNlon};
  EXPECT_STATUS(tessera_trainer_step(t, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 4, empty, nullptr),
                TESSERA_ERR_INVALID_ARGUMENT);
  if (world_size > 1) {
    std::int64_t uneven[4] = {world_rank == 0 ? 1 : 2, kChannels, nlat, kNlon};
    EXPECT_STATUS(tessera_trainer_step(t, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 4, uneven, nullptr),
                  TESSERA_ERR_SHAPE);
  }
  std::int64_t steps = -1;
  EXPECT_STATUS(tessera_trainer_steps(t, &steps), TESSERA_OK);
  CHECK(steps == 0);  // no failed call stepped
  EXPECT_STATUS(tessera_trainer_save(t, nullptr), TESSERA_OK);

  // Restoring another architecture names the difference, before any weight is read.
  tessera_trainer_t* other = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels + 1, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &other),
                TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_restore(other, (dir + "/errors_ckpt").c_str()), TESSERA_ERR_CONFIG);
  CHECK(std::string(tessera_last_error()).find("channels") != std::string::npos);
  EXPECT_STATUS(tessera_trainer_destroy(&other), TESSERA_OK);
  // ... and other normalisation statistics are another model (its inputs mean other things).
  other = create(write_config(dir, "errors_normalized", 1, 1, world_size, "", 1, true), MPI_COMM_WORLD, kMean, kStd);
  EXPECT_STATUS(tessera_trainer_restore(other, (dir + "/errors_ckpt").c_str()), TESSERA_ERR_CONFIG);
  CHECK(std::string(tessera_last_error()).find("mean") != std::string::npos);
  EXPECT_STATUS(tessera_trainer_destroy(&other), TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);

  // Configs the trainer refuses, on every rank, naming the key.
  const auto refused = [&](const std::string& name, const std::string& text, const char* key) {
    const std::string bad = dir + "/" + name + ".yaml";
    if (world_rank == 0) std::ofstream(bad) << "parallelism:\n  domain: " << world_size << "\n" << text;
    MPI_Barrier(MPI_COMM_WORLD);
    tessera_trainer_t* b = nullptr;
    EXPECT_STATUS(tessera_trainer_create(bad.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                         TESSERA_LATITUDES_CELL_CENTRES, &b),
                  TESSERA_ERR_CONFIG);
    CHECK(b == nullptr);
    CHECK(std::string(tessera_last_error()).find(key) != std::string::npos);
  };
  const std::string plain = "data:\n  normalize: false\n";
  refused("unknown", plain + "learning:\n  rate: 1\n", "unknown key 'learning'");
  refused("width", plain + "model:\n  width: 0\n", "model.width");
  refused("decoder", "model:\n  type: decoder\n", "model.type decoder");
  refused("normalize", "", "data.normalize is true (the default)");  // and no statistics given
  // Statistics: refused on every rank, naming the key or the argument.
  const auto refused_statistics = [&](const std::string& text, const double* mean, const double* std, int status,
                                      const char* key) {
    const std::string cfg = dir + "/statistics.yaml";
    if (world_rank == 0) std::ofstream(cfg) << "parallelism:\n  domain: " << world_size << "\n" << text;
    MPI_Barrier(MPI_COMM_WORLD);
    tessera_trainer_t* b = nullptr;
    EXPECT_STATUS(tessera_trainer_create_normalized(cfg.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                                    TESSERA_LATITUDES_CELL_CENTRES, mean, std, &b),
                  status);
    CHECK(b == nullptr);
    CHECK(std::string(tessera_last_error()).find(key) != std::string::npos);
  };
  const double zero_std[kChannels] = {1.0, 0.0};
  const double rank_mean[kChannels] = {1.0, static_cast<double>(world_rank)};
  refused_statistics(plain, kMean, kStd, TESSERA_ERR_CONFIG, "data.normalize is false");
  refused_statistics("", kMean, zero_std, TESSERA_ERR_INVALID_ARGUMENT, "std[1] is 0");
  refused_statistics("", kMean, nullptr, TESSERA_ERR_INVALID_ARGUMENT, "std is NULL");
  if (world_size > 1) {
    refused_statistics("", rank_mean, kStd, TESSERA_ERR_INVALID_ARGUMENT, "mean[1] differs between the ranks");
  }
  EXPECT_STATUS(tessera_trainer_create(nullptr, MPI_COMM_WORLD, 1, 1, 1, 0, &t), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon, 7, &t),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_trainer_step(nullptr, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, nullptr),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_trainer_destroy(nullptr), TESSERA_ERR_INVALID_ARGUMENT);
}

// The loss weights from the caller's latitudes (tessera_trainer_create_latitudes): rows
// all at 60 degrees weigh cos(60) / their own mean = 1 each, so training is bit for bit
// the unweighted trainer's (a weighting that assumed a global grid would not be); a
// regional grid (65-69 N) trains differently from the global cell-centre grid of the
// same row count; a latitude outside [-90, 90] is refused naming the row.
void check_latitudes(const std::string& dir, int world_size) {
  const std::string config = write_config(dir, "latitudes", 1, 1, world_size);
  const auto first_losses = [&](tessera_trainer_t* t) {
    std::int64_t lat0 = -1, nlat = -1, lon0 = -1, nlon = -1;
    EXPECT_STATUS(tessera_trainer_box(t, &lat0, &nlat, &lon0, &nlon), TESSERA_OK);
    std::vector<double> losses;
    for (std::int64_t step = 1; step <= 2; ++step) losses.push_back(train_step(t, step, 1, 0, lat0, nlat));
    EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
    return losses;
  };
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_UNWEIGHTED, &t), TESSERA_OK);
  const std::vector<double> unweighted = first_losses(t);
  std::vector<double> sixty(kNlat, 60.0), regional(kNlat);
  for (std::int64_t i = 0; i < kNlat; ++i) regional[static_cast<std::size_t>(i)] = 69.0 - 0.5 * static_cast<double>(i);
  EXPECT_STATUS(tessera_trainer_create_latitudes(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                                 sixty.data(), nullptr, nullptr, &t), TESSERA_OK);
  CHECK(first_losses(t) == unweighted);
  EXPECT_STATUS(tessera_trainer_create_latitudes(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                                 regional.data(), nullptr, nullptr, &t), TESSERA_OK);
  const std::vector<double> regional_losses = first_losses(t);
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_CELL_CENTRES, &t), TESSERA_OK);
  const std::vector<double> global_losses = first_losses(t);
  CHECK(std::isfinite(regional_losses[0]) && regional_losses[0] != global_losses[0]);
  regional[3] = 95.0;
  EXPECT_STATUS(tessera_trainer_create_latitudes(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                                 regional.data(), nullptr, nullptr, &t), TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(std::string(tessera_last_error()).find("row 3") != std::string::npos);
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), MPI_COMM_WORLD, kChannels, kNlat, kNlon,
                                       TESSERA_LATITUDES_EXPLICIT, &t), TESSERA_ERR_INVALID_ARGUMENT);
}

}  // namespace

// Issue 46: a NaN in the caller's input or an Inf in its target made the loss NaN and was
// reported as "training diverged ... lower optimizer.lr". Now the step fails on every
// rank naming the array, the step and the place (global latitude row), without the lr
// advice and without an update: the trainer still stands at the last good step, and a
// finite batch trains on.
void check_non_finite(const std::string& dir, int world_size) {
  const std::string config = write_config(dir, "non_finite", 1, 1, world_size);
  tessera_trainer_t* t = create(config, MPI_COMM_WORLD);
  std::int64_t lat0 = 0, nlat = 0, lon0 = 0, nlon = 0;
  EXPECT_STATUS(tessera_trainer_box(t, &lat0, &nlat, &lon0, &nlon), TESSERA_OK);
  (void)step_on(t, 0, kBatch, lat0, nlat);  // step 1
  constexpr std::int64_t kRow = 5, kLon = 3;
  const std::int64_t shape[4] = {kBatch, kChannels, nlat, kNlon};
  for (const char* array : {"input", "target"}) {
    std::vector<float> x = batch(1, kBatch, lat0, nlat), y = batch(2, kBatch, lat0, nlat);
    const bool input = std::string(array) == "input";
    int owner = 0;  // the rank whose band holds row kRow
    if (kRow >= lat0 && kRow < lat0 + nlat) {
      owner = world_rank;
      (input ? x : y)[static_cast<std::size_t>(((1 * kChannels + 1) * nlat + kRow - lat0) * kNlon + kLon)] =
          input ? NAN : INFINITY;
    }
    MPI_Allreduce(MPI_IN_PLACE, &owner, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, nullptr),
                  TESSERA_ERR_INVALID_ARGUMENT);
    const std::string message = tessera_last_error();
    const std::string expected = std::string("training stopped at step 2: the loss of step 2 is not finite because the ") +
                                 array + " batch of step 2 (tessera_trainer_step's " + array + ") holds " +
                                 (input ? "NaN" : "an infinite value") + " at sample 1, channel 1, latitude row 5, " +
                                 "longitude 3 (fix or drop those values where the data enters; this is not a " +
                                 "divergence) (on rank " + std::to_string(owner) + " of " + std::to_string(world_size) + ")";
    if (message.find(expected) == std::string::npos) std::fprintf(stderr, "got:  %s\nwant: %s\n", message.c_str(), expected.c_str());
    CHECK(message.find(expected) != std::string::npos);
    CHECK(message.find("optimizer.lr") == std::string::npos);
    std::int64_t steps = -1;
    EXPECT_STATUS(tessera_trainer_steps(t, &steps), TESSERA_OK);
    CHECK(steps == 1);  // the failed step did not count
  }
  // The weights were not touched: a finite batch trains on to a finite loss.
  const double loss = step_on(t, 1, kBatch, lat0, nlat);
  CHECK(std::isfinite(loss));
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &capi_test::world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const std::string dir = std::string(argc > 1 ? argv[1] : ".") + "/capi_trainer_np" + std::to_string(world_size);
  if (world_rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Every layout of this world size: dp x tp x domain.
  for (int dp = 1; dp <= world_size; ++dp) {
    for (int tp = 1; dp * tp <= world_size; ++tp) {
      if (world_size % (dp * tp) != 0) continue;
      check_layout(dir, dp, tp, world_size / (dp * tp));
    }
  }
  check_errors(dir, world_size);
  check_latitudes(dir, world_size);
  check_non_finite(dir, world_size);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf("test_capi_trainer: %d failure(s) at %d rank(s)\n", total, world_size);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
