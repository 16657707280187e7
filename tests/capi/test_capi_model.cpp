// The C API's model inference (tessera_model_*): a small field emulator is initialised
// and checkpointed through the C++ API, then loaded and run through the C API on caller
// arrays in C and in Fortran order; the outputs must equal the C++ model's bit for bit.
// Error paths: NULL handle / pointer, wrong dtype, mismatched shape, an empty or
// overflowing batch, missing checkpoint.
// Runs at 1, 2 and 4 ranks (9 latitudes: uneven bands).

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tessera.h"
#include "../support/emulator_config.hpp"
#include "capi_check.hpp"

namespace {

using capi_test::failures;
using capi_test::world_rank;
using capi_test::world_size;

// Seen from C++, every C enum of the header holds any int: a caller's out-of-range value
// (the C API rejects it with TESSERA_ERR_INVALID_ARGUMENT) must not be an invalid enum
// value inside the library (undefined behaviour, reported by UBSan), which needs a fixed
// underlying type; only such enums can be list-initialised from an int.
template <class E>
concept holds_every_int = requires(int v) { E{v}; };
static_assert(holds_every_int<tessera_dtype_t> && holds_every_int<tessera_order_t> &&
              holds_every_int<tessera_data_mode_t> && holds_every_int<tessera_mesh_dim_t> &&
              holds_every_int<tessera_pole_t> && holds_every_int<tessera_layout_t> &&
              holds_every_int<tessera_status_t>);

}  // namespace

int main(int argc, char** argv) {
  const std::string root = capi_test::init_mpi(argc, argv, "capi_model");
  {
    using namespace tessera;
    if (world_rank == 0) std::filesystem::remove_all(root);
    MPI_Barrier(MPI_COMM_WORLD);

    // The reference: the C++ model and its prediction on this rank's band.
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, world_size});
    const models::FieldEmulatorConfig config = tessera::testing::small_emulator_config(9, 8);
    models::FieldEmulator reference(config, mesh);
    nn::initialize_parameters(reference, 11);
    tessera::testing::save_emulator(root, mesh, reference, /*step=*/5);

    const domain::LocalBox box = reference.decomposition().box();
    const std::int64_t B = 2, C = 2, nl = box.lat.length, nn = box.lon.length;
    std::vector<float> x(static_cast<std::size_t>(B * C * nl * nn));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t i = 0; i < nl; ++i)
          for (std::int64_t j = 0; j < nn; ++j)
            x[static_cast<std::size_t>(((b * C + c) * nl + i) * nn + j)] =
                0.25f * static_cast<float>(b + 1) + 0.1f * static_cast<float>(c) +
                0.01f * static_cast<float>((box.lat.start + i) * 8 + j);
    const Tensor xt = Tensor::from_vector(x, {B, C, nl, nn});
    const std::vector<float> y_predict = reference.predict(xt).to_vector<float>();
    const std::vector<float> y_forward = reference.forward(xt).to_vector<float>();

    // The C API.
    tessera_mesh_t* cmesh = nullptr;
    tessera_model_t* model = nullptr;
    EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size, &cmesh), TESSERA_OK);
    EXPECT_STATUS(tessera_model_load(cmesh, root.c_str(), &model), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);  // the model keeps the mesh alive
    std::int64_t channels = 0, nlat = 0, nlon = 0, a = -1, b = -1, c = -1, d = -1;
    EXPECT_STATUS(tessera_model_info(model, &channels, &nlat, &nlon), TESSERA_OK);
    CHECK(channels == 2 && nlat == 9 && nlon == 8);
    EXPECT_STATUS(tessera_model_box(model, &a, &b, &c, &d), TESSERA_OK);
    CHECK(a == box.lat.start && b == nl && c == box.lon.start && d == nn);

    const std::int64_t shape_c[4] = {B, C, nl, nn};
    const std::int64_t shape_f[4] = {nn, nl, C, B};
    std::vector<float> y(x.size(), -1.f);
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_OK);
    CHECK(std::memcmp(y.data(), y_predict.data(), y.size() * sizeof(float)) == 0);
    std::vector<float> inout = x;  // Fortran order (same memory), output over the input
    EXPECT_STATUS(tessera_model_predict(model, inout.data(), inout.data(), TESSERA_F32, TESSERA_ORDER_FORTRAN, 4,
                                        shape_f),
                  TESSERA_OK);
    CHECK(std::memcmp(inout.data(), y_predict.data(), y.size() * sizeof(float)) == 0);
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_OK);
    CHECK(std::memcmp(y.data(), y_forward.data(), y.size() * sizeof(float)) == 0);
    const std::int64_t shape3[3] = {C, nl, nn};  // B = 1: the first field
    std::vector<float> y1(static_cast<std::size_t>(C * nl * nn));
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y1.data(), TESSERA_F32, TESSERA_ORDER_C, 3, shape3),
                  TESSERA_OK);
    {
      const std::vector<float> first = reference.forward(xt.narrow(0, 0, 1)).to_vector<float>();
      CHECK(std::memcmp(y1.data(), first.data(), y1.size() * sizeof(float)) == 0);
    }

    // Errors (each agreed by every rank where the call is collective).
    const std::int64_t wrong[4] = {B, C, nl + 1, nn};
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F64, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "TESSERA_F32") != nullptr);
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, wrong),
                  TESSERA_ERR_SHAPE);
    const std::int64_t wrong_channels[4] = {B, C + 1, nl, nn};
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, wrong_channels),
                  TESSERA_ERR_SHAPE);
    // Batch 0 used to divide by zero in the normalisation; it is rejected on every rank.
    // A batch whose element count overflows used to wrap.
    const std::int64_t empty_batch[4] = {0, C, nl, nn};
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, empty_batch),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "batch") != nullptr);
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, empty_batch),
                  TESSERA_ERR_INVALID_ARGUMENT);
    const std::int64_t empty_fortran[4] = {nn, nl, C, 0};
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_FORTRAN, 4,
                                        empty_fortran),
                  TESSERA_ERR_INVALID_ARGUMENT);
    const std::int64_t huge_batch[4] = {INT64_MAX / 4, C, nl, nn};
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, huge_batch),
                  TESSERA_ERR_SHAPE);
    CHECK(std::strstr(tessera_last_error(), "model input") != nullptr);
    // A batch that differs between the ranks of the domain group is named as such, on
    // every rank (it used to read as a halo argument mismatch).
    if (world_size > 1) {
      const std::int64_t mine[4] = {capi_test::world_rank == 0 ? B : B - 1, C, nl, nn};
      EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, mine),
                    TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "batch size") != nullptr &&
            std::strstr(tessera_last_error(), "differs between the ranks") != nullptr);
    }
    // Out-of-range enum values are argument errors (not undefined behaviour).
    EXPECT_STATUS(tessera_model_predict(model, x.data(), y.data(), tessera_dtype_t{-5}, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, tessera_order_t{1000}, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_predict(model, nullptr, y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_forward(model, x.data(), nullptr, TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_forward(model, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, nullptr),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_predict(nullptr, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_forward(nullptr, x.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape_c),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_info(nullptr, &channels, &nlat, &nlon), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_info(model, &channels, nullptr, &nlon), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_box(nullptr, &a, &b, &c, &d), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_box(model, &a, &b, &c, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
    CHECK(model == nullptr);
    EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
    EXPECT_STATUS(tessera_model_destroy(nullptr), TESSERA_ERR_INVALID_ARGUMENT);

    EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size, &cmesh), TESSERA_OK);
    EXPECT_STATUS(tessera_model_load(cmesh, (root + "/no_such").c_str(), &model), TESSERA_ERR_IO);
    EXPECT_STATUS(tessera_model_load(nullptr, root.c_str(), &model), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_load(cmesh, nullptr, &model), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_load(cmesh, root.c_str(), nullptr), TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
    EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);

    // A mesh with pipeline stages: inference runs the whole model on every rank, so it is
    // refused on every rank, naming the pipeline (it used to fail in the checkpoint's
    // checksum check, calling the file corrupted).
    if (world_size % 2 == 0) {
      EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size / 2, 2, &cmesh),
                    TESSERA_OK);
      EXPECT_STATUS(tessera_model_load(cmesh, root.c_str(), &model), TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "runs on a mesh of pipeline 1") != nullptr);
      CHECK(std::strstr(tessera_last_error(), "this mesh has pipeline 2") != nullptr);
      CHECK(model == nullptr);
      EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);
    }
  }
  return capi_test::finish("test_capi_model");
}
