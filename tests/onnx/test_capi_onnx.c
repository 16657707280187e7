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

/* The field model split over the ranks as a code splits its grid (remainder rows on the
 * last rank), against the same model run whole on every rank: this rank's block of the
 * output, in C and Fortran order. The MLP split over [2, 3] is refused naming its MatMul. */
static void check_split(tessera_mesh_t* mesh, const char* field_path, const char* mlp_path) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  enum { C = 2, H = 7, W = 8 };
  double x[C][H][W], whole[C][H][W];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < H; ++i)
      for (int j = 0; j < W; ++j) x[c][i][j] = sin(0.3 * i + 0.7 * j + c);
  const int64_t shape[4] = {1, C, H, W};
  tessera_model_t* model = NULL;
  CHECK(tessera_model_load_onnx(mesh, field_path, &model) == 0, "load field: %s", tessera_last_error());
  CHECK(tessera_model_run(model, x, 4, shape, whole, 4, shape, TESSERA_F64, TESSERA_ORDER_C) == 0, "whole run: %s",
        tessera_last_error());
  tessera_model_destroy(&model);
  /* Rows: H / size each, the remainder on the last rank. */
  const int64_t rows = H / size, first = rank * rows, count = rank == size - 1 ? H - first : rows;
  tessera_decomp_t* decomp = NULL;
  CHECK(tessera_decomp_create_boxes(MPI_COMM_WORLD, H, W, first, count, 0, W, &decomp) == 0, "boxes: %s",
        tessera_last_error());
  CHECK(tessera_model_load_onnx(mesh, field_path, &model) == 0, "load field: %s", tessera_last_error());
  CHECK(tessera_model_split_onnx(model, decomp) == 0, "split: %s", tessera_last_error());
  tessera_dtype_t dtype;
  int ndim = 0;
  int64_t extents[8];
  CHECK(tessera_model_onnx_shape(model, 1, TESSERA_ORDER_C, &dtype, &ndim, extents) == 0 && ndim == 4 &&
            extents[2] == count && extents[3] == W,
        "split output shape: rank %d, ndim %d, %lld x %lld", rank, ndim, (long long)extents[2], (long long)extents[3]);
  const int64_t local[4] = {1, C, count, W};
  double b[C * H * W], o[C * H * W]; /* [1, C, count, W], C order */
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < count * W; ++k) b[c * count * W + k] = x[c][first + k / W][k % W];
  int rc = tessera_model_run(model, b, 4, local, o, 4, local, TESSERA_F64, TESSERA_ORDER_C);
  CHECK(rc == 0, "split run: rc %d %s", rc, tessera_last_error());
  double worst = 0;
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < count * W; ++k) worst = fmax(worst, fabs(o[c * count * W + k] - whole[c][first + k / W][k % W]));
  CHECK(worst < 1e-13, "split output off the whole model's by %g on rank %d", worst, rank);
  /* Fortran order: x(lon, lat, C, N), the same memory read the other way round. */
  const int64_t fortran[4] = {W, count, C, 1};
  double f_in[C * H * W], f_out[C * H * W];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < W; ++j) f_in[j + W * (i + count * c)] = x[c][first + i][j];
  rc = tessera_model_run(model, f_in, 4, fortran, f_out, 4, fortran, TESSERA_F64, TESSERA_ORDER_FORTRAN);
  CHECK(rc == 0, "split run, Fortran order: rc %d %s", rc, tessera_last_error());
  worst = 0;
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < W; ++j) worst = fmax(worst, fabs(f_out[j + W * (i + count * c)] - whole[c][first + i][j]));
  CHECK(worst < 1e-13, "split output (Fortran order) off by %g on rank %d", worst, rank);
  tessera_model_destroy(&model);
  tessera_decomp_destroy(&decomp);

  /* The MLP's x [2, 3] split as a 2 x 3 field: its MatMul contracts the split axis. */
  if (size <= 2) {
    CHECK(tessera_decomp_create(MPI_COMM_WORLD, 2, 3, size, 1, &decomp) == 0, "mlp decomp: %s", tessera_last_error());
    CHECK(tessera_model_load_onnx(mesh, mlp_path, &model) == 0, "load mlp: %s", tessera_last_error());
    CHECK(tessera_model_split_onnx(model, decomp) == 0, "split mlp: %s", tessera_last_error());
    double mx[2][3] = {{0}}, my[2][4];
    const int64_t in_shape[2] = {2 / size, 3}, out_shape[2] = {2 / size, 4};
    rc = tessera_model_run(model, mx, 2, in_shape, my, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C);
    CHECK(rc == TESSERA_ERR_UNSUPPORTED && strstr(tessera_last_error(), "/matmul") != NULL &&
              strstr(tessera_last_error(), "cannot run domain-parallel") != NULL,
          "split MLP: rc %d, %s", rc, tessera_last_error());
    tessera_model_destroy(&model);
    tessera_decomp_destroy(&decomp);
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
  if (argc > 2) check_split(mesh, argv[2], argv[1]);
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
