/* The C API on an ONNX model (tessera_model_load_onnx, _onnx_shape, _run): the graph
 * y = tanh(x W + b) written by make_capi_model.py, run on every rank against the same
 * graph computed here by hand, in C and Fortran order; the refusals named (a shape or a
 * dtype that is not the graph's, the field-emulator calls on it, a split mesh, a missing
 * file on every rank). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessera/tessera.h"

static int failures = 0;
static int rank = 0;

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) {                                       \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, "\n");                             \
      ++failures;                                        \
    }                                                    \
  } while (0)

static const double W[3][4] = {{0.1, -0.2, 0.3, 0.4}, {0.5, -0.6, 0.7, 0.8}, {-0.9, 1.0, 0.2, -0.3}};
static const double B[4] = {0.05, -0.1, 0.15, 0.2};

static void by_hand(const double x[2][3], double y[2][4]) {
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      double z = B[j];
      for (int p = 0; p < 3; ++p) z += x[i][p] * W[p][j];
      y[i][j] = tanh(z);
    }
  }
}

static void check_shapes(tessera_model_t* model) {
  tessera_dtype_t dtype = TESSERA_F32;
  int ndim = 0;
  int64_t shape[8] = {0};
  int rc = tessera_model_onnx_shape(model, 0, TESSERA_ORDER_C, &dtype, &ndim, shape);
  CHECK(rc == 0 && dtype == TESSERA_F64 && ndim == 2 && shape[0] == 2 && shape[1] == 3, "input shape C: rc %d", rc);
  rc = tessera_model_onnx_shape(model, 1, TESSERA_ORDER_FORTRAN, &dtype, &ndim, shape);
  CHECK(rc == 0 && ndim == 2 && shape[0] == 4 && shape[1] == 2, "output shape Fortran: rc %d, [%lld, %lld]", rc,
        (long long)shape[0], (long long)shape[1]);
  rc = tessera_model_onnx_shape(model, 2, TESSERA_ORDER_C, &dtype, &ndim, shape);
  CHECK(rc == TESSERA_ERR_INVALID_ARGUMENT && strstr(tessera_last_error(), "which"), "which 2: rc %d", rc);
}

static void check_run(tessera_model_t* model) {
  double x[2][3], want[2][4], y[2][4];
  for (int i = 0; i < 2; ++i) {
    for (int p = 0; p < 3; ++p) x[i][p] = 0.25 * (i + 1) - 0.3 * p + 0.1 * rank;
  }
  by_hand((const double(*)[3])x, want);
  const int64_t in_shape[2] = {2, 3}, out_shape[2] = {2, 4};
  int rc = tessera_model_run(model, x, 2, in_shape, y, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C);
  CHECK(rc == 0, "run: rc %d %s", rc, tessera_last_error());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) CHECK(fabs(y[i][j] - want[i][j]) < 1e-14, "y[%d][%d] %g, by hand %g", i, j, y[i][j], want[i][j]);
  }
  /* Fortran order: the same memory declared x(3, 2), y(4, 2). */
  const int64_t in_f[2] = {3, 2}, out_f[2] = {4, 2};
  memset(y, 0, sizeof y);
  rc = tessera_model_run(model, x, 2, in_f, y, 2, out_f, TESSERA_F64, TESSERA_ORDER_FORTRAN);
  CHECK(rc == 0 && fabs(y[1][3] - want[1][3]) < 1e-14, "Fortran order: rc %d", rc);
  /* The graph's shape, not the caller's guess: named in the caller's order. */
  const int64_t wrong[2] = {3, 2};
  rc = tessera_model_run(model, x, 2, wrong, y, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C);
  CHECK(rc == TESSERA_ERR_SHAPE && strstr(tessera_last_error(), "[2, 3]") && strstr(tessera_last_error(), "[3, 2]"),
        "wrong input shape: rc %d %s", rc, tessera_last_error());
  const int64_t wrong_out[2] = {2, 3};
  rc = tessera_model_run(model, x, 2, in_shape, y, 2, wrong_out, TESSERA_F64, TESSERA_ORDER_C);
  CHECK(rc == TESSERA_ERR_SHAPE && strstr(tessera_last_error(), "model output"), "wrong output shape: rc %d %s", rc,
        tessera_last_error());
  float xf[2][3] = {{0}};
  rc = tessera_model_run(model, xf, 2, in_shape, y, 2, out_shape, TESSERA_F32, TESSERA_ORDER_C);
  CHECK(rc == TESSERA_ERR_INVALID_ARGUMENT && strstr(tessera_last_error(), "f64"), "f32 array: rc %d %s", rc,
        tessera_last_error());
}

static void check_refusals(tessera_model_t* model, const char* path) {
  int type = -1;
  CHECK(tessera_model_type(model, &type) == 0 && type == TESSERA_MODEL_ONNX, "type %d", type);
  float field[4] = {0};
  const int64_t shape[3] = {1, 2, 2};
  int rc = tessera_model_predict(model, field, field, TESSERA_F32, TESSERA_ORDER_C, 3, shape);
  CHECK(rc == TESSERA_ERR_INVALID_ARGUMENT && strstr(tessera_last_error(), "tessera_model_run"), "predict: rc %d %s",
        rc, tessera_last_error());
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2 == 0) {
    tessera_mesh_t* split = NULL;
    CHECK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 2, size / 2, &split) == 0, "split mesh");
    tessera_model_t* refused = NULL;
    rc = tessera_model_load_onnx(split, path, &refused);
    CHECK(rc == TESSERA_ERR_UNSUPPORTED && refused == NULL && strstr(tessera_last_error(), "tensor 2"),
          "split mesh: rc %d %s", rc, tessera_last_error());
    tessera_mesh_destroy(&split);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 2) {
    fprintf(stderr, "usage: test_capi_onnx MODEL.onnx\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  tessera_mesh_t* mesh = NULL;
  CHECK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, &mesh) == 0, "mesh: %s", tessera_last_error());
  tessera_model_t* model = NULL;
  int rc = tessera_model_load_onnx(mesh, argv[1], &model);
  CHECK(rc == 0 && model != NULL, "load: rc %d %s", rc, tessera_last_error());
  if (model) {
    check_shapes(model);
    check_run(model);
    check_refusals(model, argv[1]);
    CHECK(tessera_model_destroy(&model) == 0 && model == NULL, "destroy");
  }
  /* A file missing on one rank fails on every rank, with that rank's message. */
  char missing[4096];
  snprintf(missing, sizeof missing, "%s%s", argv[1], rank == 0 ? ".missing" : "");
  rc = tessera_model_load_onnx(mesh, missing, &model);
  CHECK(rc != 0 && model == NULL, "a file missing on rank 0 loads on rank %d: rc %d", rank, rc);
  tessera_mesh_destroy(&mesh);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_onnx: %d failure(s)\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
