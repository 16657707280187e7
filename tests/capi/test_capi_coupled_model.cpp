// tessera_model_load_coupled: the field emulator on M = 1 and 2 model ranks (and tensor
// 2) run from the code's decomposition (2x2 blocks at 4 ranks, bands at 2 and 3) through
// the C API, on arrays in C and in Fortran order (output over the input), against the
// serial C++ model on the gathered field: bit-identical at M = 1, to rounding otherwise.
// Errors on every rank: a model grid that is not the decomposition's, M > N, a
// duplicate in the rank list, a wrong shape on one rank. Online training
// (tessera_model_train_step): two AdamW steps and one SGD step per case equal the same
// steps of the serial C++ model on the gathered fields (losses, and the trained model's
// prediction: bit for bit at M = 1), the loss the same on every rank.

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"
#include "tessera/tessera.h"
#include "../support/emulator_config.hpp"
#include "capi_check.hpp"

namespace {

using capi_test::failures;
using capi_test::world_rank;
using capi_test::world_size;

constexpr std::int64_t kLat = 9, kLon = 8, kC = 2, kB = 2;  // kC: small_emulator_config's channels

}  // namespace

int main(int argc, char** argv) {
  const std::string root = capi_test::init_mpi(argc, argv, "capi_coupled_model");
  {
    using namespace tessera;
    // The checkpoint and the serial reference (every rank its own serial model).
    const models::FieldEmulatorConfig config = tessera::testing::small_emulator_config(kLat, kLon);
    Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
    models::FieldEmulator serial(config, self);
    nn::initialize_parameters(serial, 23);
    if (world_rank == 0) {
      std::filesystem::remove_all(root);
      tessera::testing::save_emulator(root, self, serial, /*step=*/1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<float> global(static_cast<std::size_t>(kB * kC * kLat * kLon));
    for (std::size_t i = 0; i < global.size(); ++i) global[i] = static_cast<float>(std::cos(0.3 * double(i)) * 2.0);
    const std::vector<float> expected = serial.predict(Tensor::from_vector(global, {kB, kC, kLat, kLon})).to_vector<float>();

    const int glat = world_size == 4 ? 2 : world_size, glon = world_size == 4 ? 2 : 1;
    tessera_decomp_t* d = nullptr;
    EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, kLat, kLon, glat, glon, &d), TESSERA_OK);
    std::int64_t ls = 0, lc = 0, os = 0, oc = 0;
    tessera_decomp_box(d, &ls, &lc, &os, &oc);
    // This rank's box of the global field and of the reference, C order (B, C, lat, lon).
    auto box_of = [&](const std::vector<float>& g) {
      std::vector<float> out;
      for (std::int64_t b = 0; b < kB; ++b)
        for (std::int64_t c = 0; c < kC; ++c)
          for (std::int64_t i = 0; i < lc; ++i)
            for (std::int64_t j = 0; j < oc; ++j)
              out.push_back(g[static_cast<std::size_t>(((b * kC + c) * kLat + ls + i) * kLon + os + j)]);
      return out;
    };
    const std::vector<float> x = box_of(global), want = box_of(expected);

    struct Case {
      int m, tensor;
      std::vector<int> list;
    };
    std::vector<Case> cases{{1, 1, {}}};
    if (world_size >= 2) {
      cases.push_back({2, 1, {}});
      cases.push_back({2, 2, {}});
      cases.push_back({2, 1, {world_size - 1, 0}});
    }
    for (const Case& c : cases) {
      tessera_model_t* model = nullptr;
      EXPECT_STATUS(tessera_model_load_coupled(d, root.c_str(), c.m, c.list.empty() ? nullptr : c.list.data(),
                                               c.tensor, &model),
                    TESSERA_OK);
      if (model == nullptr) continue;
      int msize = 0, mrank = -2;
      EXPECT_STATUS(tessera_model_coupling(model, &msize, &mrank), TESSERA_OK);
      CHECK(msize == c.m);
      if (!c.list.empty()) CHECK(mrank == (world_rank == c.list[0] ? 0 : world_rank == c.list[1] ? 1 : -1));
      std::int64_t a = -1, b = -1, e = -1, f = -1, channels = 0, nlat = 0, nlon = 0;
      EXPECT_STATUS(tessera_model_box(model, &a, &b, &e, &f), TESSERA_OK);
      CHECK(a == ls && b == lc && e == os && f == oc);
      EXPECT_STATUS(tessera_model_info(model, &channels, &nlat, &nlon), TESSERA_OK);
      CHECK(channels == kC && nlat == kLat && nlon == kLon);

      const std::int64_t shape_c[4] = {kB, kC, lc, oc};
      const std::int64_t shape_f[4] = {oc, lc, kC, kB};
      std::vector<float> y(x.size(), -1.f);
      EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                    TESSERA_OK);
      if (c.m == 1) {
        CHECK(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0);
      } else {
        bool close = true;
        for (std::size_t i = 0; i < y.size(); ++i) close = close && std::fabs(y[i] - want[i]) <= 1e-5 * (1 + std::fabs(want[i]));
        CHECK(close);
      }
      std::vector<float> inout = x;  // Fortran order, output over the input
      EXPECT_STATUS(tessera_model_predict(model, inout.data(), inout.data(), TESSERA_F32, TESSERA_ORDER_FORTRAN, 4,
                                          shape_f),
                    TESSERA_OK);
      CHECK(std::memcmp(inout.data(), y.data(), y.size() * sizeof(float)) == 0);
      // A wrong shape on one rank: every rank fails.
      const std::int64_t wrong[4] = {kB, kC, lc + (world_rank == world_size - 1 ? 1 : 0), oc};
      EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, wrong),
                    TESSERA_ERR_SHAPE);
      EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F64, TESSERA_ORDER_C, 4, shape_c),
                    TESSERA_ERR_INVALID_ARGUMENT);
      // As the Fortran module calls it (every rank one latitude too many): the message gives
      // rank 0's array as declared and its box, lon first and 1-based.
      {
        const std::int64_t wrong_f[4] = {oc, lc + 1, kC, kB};
        tessera_set_fortran_caller(1);
        const int status =
            tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_FORTRAN, 4, wrong_f);
        tessera_set_fortran_caller(0);
        CHECK(status == TESSERA_ERR_SHAPE);
        const auto n = [](std::int64_t v) { return std::to_string(v); };
        const std::string want_text = "tessera_model_forward: model input of extents (" + n(oc) + ", " + n(lc + 1) +
                                      ", " + n(kC) + ", " + n(kB) + ") is not (" + n(oc) + ", " + n(lc) + ", " +
                                      n(kC) + ", B): B fields of this rank's box lon " + n(os + 1) + ":" +
                                      n(os + oc) + " x lat " + n(ls + 1) + ":" + n(ls + lc);
        if (world_rank == 0) CHECK(std::strstr(tessera_last_error(), want_text.c_str()) != nullptr);
      }
      // Online training from the code's layout against the serial twin.
      {
        Mesh twin_mesh(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
        std::unique_ptr<models::FieldEmulator> twin = load_model(root, twin_mesh);
        std::vector<float> goal(global.size());
        for (std::size_t i = 0; i < goal.size(); ++i) goal[i] = static_cast<float>(std::sin(0.11 * double(i)));
        const Tensor gx = Tensor::from_vector(global, {kB, kC, kLat, kLon});
        const Tensor gy = Tensor::from_vector(goal, {kB, kC, kLat, kLon});
        const std::vector<float> t = box_of(goal);
        std::unique_ptr<Optimizer> adamw = std::make_unique<AdamW>(twin->named_parameters(), AdamWOptions{.lr = 1e-2});
        for (int step = 0; step < 2; ++step) {
          double loss = -1;
          EXPECT_STATUS(tessera_model_train_step(model, x.data(), t.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c,
                                                 "adamw", 1e-2, &loss),
                        TESSERA_OK);
          adamw->zero_grad();
          const domain::LossResult r =
              domain::lat_weighted_mse(twin->forward(gx), gy, twin->decomposition(), twin->config().latitude_grid);
          twin->backward(r.grad);
          adamw->step();
          double low = loss, high = loss;
          MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
          MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          CHECK(low == high);
          CHECK(c.m == 1 ? loss == r.value : std::fabs(loss - r.value) <= 1e-6 * r.value);
        }
        // Another optimizer after the first step: refused on every rank.
        EXPECT_STATUS(tessera_model_train_step(model, x.data(), t.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c,
                                               "sgd", 0.1, nullptr),
                      TESSERA_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(tessera_model_train_step(model, x.data(), t.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c,
                                               "lbfgs", 0.1, nullptr),
                      TESSERA_ERR_INVALID_ARGUMENT);
        std::int64_t steps = -1;
        EXPECT_STATUS(tessera_model_train_steps(model, &steps), TESSERA_OK);
        CHECK(steps == 2);
        // The trained weights, through the prediction they make.
        const std::vector<float> twin_y = box_of(twin->forward(gx).to_vector<float>());
        EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                      TESSERA_OK);
        if (c.m == 1) {
          CHECK(std::memcmp(y.data(), twin_y.data(), y.size() * sizeof(float)) == 0);
        } else {
          bool close = true;
          for (std::size_t i = 0; i < y.size(); ++i)
            close = close && std::fabs(y[i] - twin_y[i]) <= 1e-5 * (1 + std::fabs(twin_y[i]));
          CHECK(close);
        }
      }
      EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
    }

    // Errors.
    tessera_model_t* model = nullptr;
    tessera_decomp_t* other = nullptr;
    EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, kLat + 1, kLon, glat, glon, &other), TESSERA_OK);
    EXPECT_STATUS(tessera_model_load_coupled(other, root.c_str(), 1, nullptr, 1, &model), TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "nlat x nlon") != nullptr);
    EXPECT_STATUS(tessera_model_load_coupled(d, root.c_str(), world_size + 1, nullptr, 1, &model),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "M > N") != nullptr);
    if (world_size >= 2) {
      const int dup[2] = {1, 1};
      EXPECT_STATUS(tessera_model_load_coupled(d, root.c_str(), 2, dup, 1, &model), TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "twice") != nullptr);
    }
    EXPECT_STATUS(tessera_model_load_coupled(d, (root + "/missing").c_str(), 1, nullptr, 1, &model), TESSERA_ERR_IO);
    EXPECT_STATUS(tessera_model_load_coupled(nullptr, root.c_str(), 1, nullptr, 1, &model),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
    // Training a model of tessera_model_load (not coupled) is refused.
    {
      tessera_mesh_t* mesh = nullptr;
      EXPECT_STATUS(tessera_mesh_create(MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1, &mesh), TESSERA_OK);
      EXPECT_STATUS(tessera_model_load(mesh, root.c_str(), &model), TESSERA_OK);
      const std::int64_t whole[4] = {kB, kC, kLat, kLon};
      EXPECT_STATUS(tessera_model_train_step(model, global.data(), global.data(), TESSERA_F32, TESSERA_ORDER_C, 4,
                                             whole, "adamw", 1e-3, nullptr),
                    TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "tessera_model_load_coupled") != nullptr);
      tessera_model_destroy(&model);
      tessera_mesh_destroy(&mesh);
    }
    tessera_decomp_destroy(&other);
    tessera_decomp_destroy(&d);
  }
  return capi_test::finish("test_capi_coupled_model");
}
