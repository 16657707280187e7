// The online trainer on the code's own decomposition (tessera_trainer_use_decomp): a
// code decomposed in 2-D blocks by MPI_Cart_create with dims {lon, lat} (MPI_Dims_create;
// the remainder of each axis on its last rank), through tessera_decomp_create_cart, and
// the same blocks in reversed rank order through tessera_decomp_create_boxes. At every
// dp = 1 layout of the world size (domain = size; tp 2 x domain 2 at 4 ranks; tp = size):
// kSteps steps fed the code's blocks give the losses of the same trainer fed its own
// bands bit for bit (the fields are copied to the bands, never computed), and the
// prediction written into the code's blocks is the banded prediction at the same cells,
// bit for bit, in C and Fortran order; f64 fields of the same values the same (f32 ->
// f64 is exact). A NULL decomposition returns to the bands. Errors: a decomposition on
// another number of ranks (naming both sizes), another grid, parallelism.data > 1
// (naming it), band-shaped fields given to a trainer on blocks. Runs at 1, 2 and 4 ranks.

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "capi_check.hpp"

namespace {

using capi_test::world_rank;
using capi_test::world_size;

constexpr std::int64_t kChannels = 2, kNlat = 9, kNlon = 11, kBatch = 2, kSteps = 4;

std::string write_config(const std::string& dir, const std::string& name, int dp, int tp, int domain) {
  const std::string path = dir + "/" + name + ".yaml";
  if (world_rank == 0) {
    std::ofstream out(path);
    out << "parallelism:\n  data: " << (dp > 1 ? "ddp" : "none") << "\n  tensor: " << tp << "\n  domain: " << domain
        << "\nmodel:\n  width: 6\n  mlp_hidden: 8\n  blocks: 1\n  kernel: 3\n"
        << "optimizer:\n  type: adamw\n  lr: 0.01\n  clip_grad_norm: 1.0\n  warmup_steps: 2\n"
        << "schedule:\n  steps: 6\n  seed: 7\n"
        << "data:\n  normalize: false\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

float value(std::int64_t s, std::int64_t c, std::int64_t lat, std::int64_t lon) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(lon + s) + 0.3 * static_cast<double>(c)) *
                            std::cos(0.4 * static_cast<double>(lat) - 0.2 * static_cast<double>(s)));
}

// A box: 0-based starts and counts.
struct Box {
  std::int64_t lat0 = 0, nlat = 0, lon0 = 0, nlon = 0;
};

// Samples [first, first + count) over `box`: float x[B][C][lat][lon].
std::vector<float> fields(std::int64_t first, std::int64_t count, const Box& box) {
  std::vector<float> x;
  for (std::int64_t b = 0; b < count; ++b)
    for (std::int64_t c = 0; c < kChannels; ++c)
      for (std::int64_t i = 0; i < box.nlat; ++i)
        for (std::int64_t j = 0; j < box.nlon; ++j) x.push_back(value(first + b, c, box.lat0 + i, box.lon0 + j));
  return x;
}

std::vector<double> to_f64(const std::vector<float>& x) { return {x.begin(), x.end()}; }

struct Run {
  std::vector<double> losses;
  std::vector<float> global_prediction;  // (C, nlat, nlon), sample 100, on every rank
};

// kSteps steps over `box` (step s: samples [(s-1) B, s B), their successors as targets),
// then the prediction of sample 100 over the box; f64 fields when `f64`.
std::vector<double> train(tessera_trainer_t* t, const Box& box, bool f64, std::vector<float>& prediction) {
  std::vector<double> losses;
  const std::int64_t shape[4] = {kBatch, kChannels, box.nlat, box.nlon};
  for (std::int64_t s = 1; s <= kSteps; ++s) {
    const std::vector<float> x = fields((s - 1) * kBatch, kBatch, box), y = fields((s - 1) * kBatch + 1, kBatch, box);
    double loss = NAN;
    if (f64) {
      const std::vector<double> xd = to_f64(x), yd = to_f64(y);
      EXPECT_STATUS(tessera_trainer_step(t, xd.data(), yd.data(), TESSERA_F64, TESSERA_ORDER_C, 4, shape, &loss),
                    TESSERA_OK);
    } else {
      EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape, &loss),
                    TESSERA_OK);
    }
    losses.push_back(loss);
  }
  std::vector<float> p = fields(100, 1, box);
  const std::int64_t one[3] = {kChannels, box.nlat, box.nlon};
  if (f64) {
    std::vector<double> pd = to_f64(p);
    EXPECT_STATUS(tessera_trainer_predict(t, pd.data(), pd.data(), TESSERA_F64, TESSERA_ORDER_C, 3, one), TESSERA_OK);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(pd[i]);
    CHECK(to_f64(p) == pd);  // the f64 prediction is the f32 model's, exactly
  } else {
    EXPECT_STATUS(tessera_trainer_predict(t, p.data(), p.data(), TESSERA_F32, TESSERA_ORDER_C, 3, one), TESSERA_OK);
  }
  prediction = p;
  return losses;
}

// Every rank's box of a prediction into the global (C, nlat, nlon) field on every rank.
std::vector<float> gather(const std::vector<float>& p, const Box& box) {
  std::vector<float> g(static_cast<std::size_t>(kChannels * kNlat * kNlon), -std::numeric_limits<float>::infinity());
  std::size_t k = 0;
  for (std::int64_t c = 0; c < kChannels; ++c)
    for (std::int64_t i = 0; i < box.nlat; ++i)
      for (std::int64_t j = 0; j < box.nlon; ++j)
        g[static_cast<std::size_t>((c * kNlat + box.lat0 + i) * kNlon + box.lon0 + j)] = p[k++];
  // tp replicas hold the same band: the max of equal values.
  MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  return g;
}

Box trainer_box(tessera_trainer_t* t) {
  Box b;
  EXPECT_STATUS(tessera_trainer_box(t, &b.lat0, &b.nlat, &b.lon0, &b.nlon), TESSERA_OK);
  return b;
}

Box decomp_box(const tessera_decomp_t* d) {
  Box b;
  EXPECT_STATUS(tessera_decomp_box(d, &b.lat0, &b.nlat, &b.lon0, &b.nlon), TESSERA_OK);
  return b;
}

tessera_trainer_t* create(const std::string& config, MPI_Comm comm = MPI_COMM_WORLD) {
  tessera_trainer_t* t = nullptr;
  EXPECT_STATUS(tessera_trainer_create(config.c_str(), comm, kChannels, kNlat, kNlon, TESSERA_LATITUDES_CELL_CENTRES,
                                       &t),
                TESSERA_OK);
  return t;
}

bool error_has(const char* text) { return std::string(tessera_last_error()).find(text) != std::string::npos; }

// The code's decompositions: the Cartesian one and the same blocks in reversed rank order.
struct Code {
  MPI_Comm cart = MPI_COMM_NULL, reversed = MPI_COMM_NULL;
  tessera_decomp_t* by_cart = nullptr;
  tessera_decomp_t* by_boxes = nullptr;
};

Code make_code() {
  Code code;
  int dims[2] = {0, 0}, periods[2] = {1, 0};  // {lon, lat}: periodic in longitude
  MPI_Dims_create(world_size, 2, dims);
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &code.cart);
  EXPECT_STATUS(tessera_decomp_create_cart(code.cart, kNlat, kNlon, TESSERA_CART_LON_LAT, TESSERA_SPLIT_LAST_RANK,
                                           &code.by_cart),
                TESSERA_OK);
  const Box box = decomp_box(code.by_cart);
  int rank = 0;
  MPI_Comm_rank(code.cart, &rank);
  MPI_Comm_split(code.cart, 0, world_size - 1 - rank, &code.reversed);
  EXPECT_STATUS(tessera_decomp_create_boxes(code.reversed, kNlat, kNlon, box.lat0, box.nlat, box.lon0, box.nlon,
                                            &code.by_boxes),
                TESSERA_OK);
  return code;
}

// One layout: the banded reference, then the code's blocks through each decomposition.
void check_layout(const std::string& dir, const Code& code, int tp, int domain) {
  const std::string name = "tp" + std::to_string(tp) + "_domain" + std::to_string(domain);
  const std::string config = write_config(dir, name, 1, tp, domain);
  Run banded;
  {
    tessera_trainer_t* t = create(config);
    const Box band = trainer_box(t);
    std::vector<float> p;
    banded.losses = train(t, band, false, p);
    banded.global_prediction = gather(p, band);
    EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
  }
  for (const tessera_decomp_t* d : {code.by_cart, code.by_boxes}) {
    const Box box = decomp_box(d);
    for (const bool f64 : {false, true}) {
      tessera_trainer_t* t = create(config);
      EXPECT_STATUS(tessera_trainer_use_decomp(t, d), TESSERA_OK);
      std::vector<float> p;
      const std::vector<double> losses = train(t, box, f64, p);
      double worst = 0;
      for (std::size_t s = 0; s < losses.size(); ++s) {
        worst = std::max(worst, std::fabs(losses[s] - banded.losses[s]) / banded.losses[s]);
      }
      CHECK(losses == banded.losses);
      // The prediction in the code's blocks: the banded one at the same cells.
      std::size_t k = 0, differ = 0;
      for (std::int64_t c = 0; c < kChannels; ++c)
        for (std::int64_t i = 0; i < box.nlat; ++i)
          for (std::int64_t j = 0; j < box.nlon; ++j) {
            const float want =
                banded.global_prediction[static_cast<std::size_t>((c * kNlat + box.lat0 + i) * kNlon + box.lon0 + j)];
            differ += p[k++] != want;
          }
      CHECK(differ == 0);
      // Fortran order: x(lon, lat, C), the same memory.
      std::vector<float> pf = fields(100, 1, box);
      const std::int64_t fshape[3] = {box.nlon, box.nlat, kChannels};
      EXPECT_STATUS(tessera_trainer_predict(t, pf.data(), pf.data(), TESSERA_F32, TESSERA_ORDER_FORTRAN, 3, fshape),
                    TESSERA_OK);
      CHECK(pf == p);
      // Back to the bands: the next step takes the band again.
      const Box band = trainer_box(t);
      EXPECT_STATUS(tessera_trainer_use_decomp(t, nullptr), TESSERA_OK);
      const std::vector<float> x = fields(50, 1, band), y = fields(51, 1, band);
      const std::int64_t bshape[3] = {kChannels, band.nlat, band.nlon};
      EXPECT_STATUS(tessera_trainer_step(t, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 3, bshape, nullptr),
                    TESSERA_OK);
      if (world_rank == 0) {
        std::printf("tp %d x domain %d, %s, %s: %lld steps, worst loss difference %.3g (relative), %zu of the "
                    "prediction's cells differ\n",
                    tp, domain, d == code.by_cart ? "create_cart" : "create_boxes (reversed ranks)",
                    f64 ? "f64" : "f32", static_cast<long long>(kSteps), worst, differ);
      }
      EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
    }
  }
}

void check_errors(const std::string& dir, const Code& code) {
  const std::string config = write_config(dir, "errors", 1, 1, world_size);
  tessera_trainer_t* t = create(config);
  // Another grid.
  tessera_decomp_t* other = nullptr;
  EXPECT_STATUS(tessera_decomp_create_cart(code.cart, kNlat + 1, kNlon, TESSERA_CART_LON_LAT,
                                           TESSERA_SPLIT_LAST_RANK, &other),
                TESSERA_OK);
  EXPECT_STATUS(tessera_trainer_use_decomp(t, other), TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(error_has("10 x 11") && error_has("9 x 11"));
  EXPECT_STATUS(tessera_decomp_destroy(&other), TESSERA_OK);
  if (world_size > 1) {
    // A decomposition of one rank.
    tessera_decomp_t* self = nullptr;
    EXPECT_STATUS(tessera_decomp_create_boxes(MPI_COMM_SELF, kNlat, kNlon, 0, kNlat, 0, kNlon, &self), TESSERA_OK);
    EXPECT_STATUS(tessera_trainer_use_decomp(t, self), TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(error_has("has 1 ranks"));
    CHECK(error_has(("the trainer's " + std::to_string(world_size)).c_str()));
    EXPECT_STATUS(tessera_decomp_destroy(&self), TESSERA_OK);
    // Band-shaped fields given to a trainer on the code's blocks (they differ somewhere).
    EXPECT_STATUS(tessera_trainer_use_decomp(t, code.by_cart), TESSERA_OK);
    const Box band = trainer_box(t), box = decomp_box(code.by_cart);
    int differs = band.nlat != box.nlat || band.nlon != box.nlon;
    MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(differs == 1);
    const std::vector<float> x = fields(0, 1, band);
    const std::int64_t bshape[3] = {kChannels, band.nlat, band.nlon};
    EXPECT_STATUS(tessera_trainer_step(t, x.data(), x.data(), TESSERA_F32, TESSERA_ORDER_C, 3, bshape, nullptr),
                  differs ? TESSERA_ERR_SHAPE : TESSERA_OK);
    // parallelism.data > 1.
    const std::string dp_config = write_config(dir, "errors_dp", 2, 1, world_size / 2);
    tessera_trainer_t* dp = create(dp_config);
    EXPECT_STATUS(tessera_trainer_use_decomp(dp, code.by_cart), TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(error_has("parallelism.data"));
    EXPECT_STATUS(tessera_trainer_destroy(&dp), TESSERA_OK);
  }
  EXPECT_STATUS(tessera_trainer_use_decomp(nullptr, code.by_cart), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_trainer_destroy(&t), TESSERA_OK);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = capi_test::init_mpi(argc, argv, "capi_trainer_decomp");
  if (world_rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Code code = make_code();
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp == 0) check_layout(dir, code, tp, world_size / tp);
  }
  check_errors(dir, code);
  EXPECT_STATUS(tessera_decomp_destroy(&code.by_cart), TESSERA_OK);
  EXPECT_STATUS(tessera_decomp_destroy(&code.by_boxes), TESSERA_OK);
  MPI_Comm_free(&code.reversed);
  MPI_Comm_free(&code.cart);
  return capi_test::finish("test_capi_trainer_decomp");
}
