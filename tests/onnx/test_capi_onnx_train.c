/* tessera_model_onnx_train_step and tessera_model_save_onnx (the C API's fine-tuning of
 * an imported graph): the MLP y = tanh(x W + b) of make_capi_model.py, every rank with
 * its own batch, one SGD step against the step computed here by hand (the gradient of
 * the mean over every rank's elements); the loss; a second step asking for AdamW and a
 * target of the wrong shape refused; the saved file reloads to the trained model. The
 * field model split over the ranks' rows trains like the whole field trained alone. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessera/tessera.h"

static int failures = 0;
static int rank = 0, size = 1;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

static const double W0[3][4] = {{0.1, -0.2, 0.3, 0.4}, {0.5, -0.6, 0.7, 0.8}, {-0.9, 1.0, 0.2, -0.3}};
static const double B0[4] = {0.05, -0.1, 0.15, 0.2};

static void batch_of(int r, double x[2][3], double t[2][4]) {
  for (int i = 0; i < 2; ++i) {
    for (int p = 0; p < 3; ++p) x[i][p] = 0.3 * (i + 1) - 0.2 * p + 0.15 * r;
    for (int j = 0; j < 4; ++j) t[i][j] = 0.1 * j - 0.2 * i + 0.05 * r;
  }
}

static void mlp(const double w[3][4], const double b[4], const double x[2][3], double y[2][4]) {
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      double z = b[j];
      for (int p = 0; p < 3; ++p) z += x[i][p] * w[p][j];
      y[i][j] = tanh(z);
    }
}

static void check_mlp_step(tessera_mesh_t* mesh, const char* path, const char* saved) {
  tessera_model_t* model = NULL;
  CHECK(tessera_model_load_onnx(mesh, path, &model) == 0, "load: %s", tessera_last_error());
  double x[2][3], t[2][4];
  batch_of(rank, x, t);
  const int64_t in_shape[2] = {2, 3}, out_shape[2] = {2, 4};
  double loss = -1;
  const double lr = 0.1;
  int rc = tessera_model_onnx_train_step(model, x, 2, in_shape, t, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C,
                                         TESSERA_OPTIMIZER_SGD, lr, &loss);
  CHECK(rc == 0, "train step: rc %d %s", rc, tessera_last_error());

  /* By hand: every rank's batch, the mean over all 8 x size elements. */
  double gw[3][4] = {{0}}, gb[4] = {0}, want_loss = 0;
  const double n = 8.0 * size;
  for (int r = 0; r < size; ++r) {
    double xr[2][3], tr[2][4], y[2][4];
    batch_of(r, xr, tr);
    mlp(W0, B0, (const double(*)[3])xr, y);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) {
        const double d = y[i][j] - tr[i][j], dz = 2.0 * d / n * (1.0 - y[i][j] * y[i][j]);
        want_loss += d * d / n;
        gb[j] += dz;
        for (int p = 0; p < 3; ++p) gw[p][j] += xr[i][p] * dz;
      }
  }
  CHECK(fabs(loss - want_loss) < 1e-14, "loss %.17g, by hand %.17g", loss, want_loss);
  double w1[3][4], b1[4];
  for (int j = 0; j < 4; ++j) {
    b1[j] = B0[j] - lr * gb[j];
    for (int p = 0; p < 3; ++p) w1[p][j] = W0[p][j] - lr * gw[p][j];
  }
  double probe[2][3] = {{0.2, -0.4, 0.6}, {-0.1, 0.3, 0.5}}, want[2][4], got[2][4];
  mlp((const double(*)[4])w1, b1, (const double(*)[3])probe, want);
  rc = tessera_model_run(model, probe, 2, in_shape, got, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C);
  double worst = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) worst = fmax(worst, fabs(got[i][j] - want[i][j]));
  CHECK(rc == 0 && worst < 1e-14, "after the step: rc %d, off the hand step by %g", rc, worst);

  /* The optimizer's kind is the first step's; the target has the output's shape. */
  rc = tessera_model_onnx_train_step(model, x, 2, in_shape, t, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C,
                                     TESSERA_OPTIMIZER_ADAMW, lr, &loss);
  CHECK(rc == TESSERA_ERR_INVALID_ARGUMENT && strstr(tessera_last_error(), "first step") != NULL,
        "AdamW after SGD: rc %d %s", rc, tessera_last_error());
  rc = tessera_model_onnx_train_step(model, x, 2, in_shape, x, 2, in_shape, TESSERA_F64, TESSERA_ORDER_C,
                                     TESSERA_OPTIMIZER_SGD, lr, &loss);
  CHECK(rc == TESSERA_ERR_SHAPE && strstr(tessera_last_error(), "model target") != NULL,
        "a target of the input's shape: rc %d %s", rc, tessera_last_error());

  /* Saved and reloaded: the trained model. */
  CHECK(tessera_model_save_onnx(model, path, saved) == 0, "save: %s", tessera_last_error());
  tessera_model_t* reloaded = NULL;
  CHECK(tessera_model_load_onnx(mesh, saved, &reloaded) == 0, "reload: %s", tessera_last_error());
  double again[2][4];
  rc = tessera_model_run(reloaded, probe, 2, in_shape, again, 2, out_shape, TESSERA_F64, TESSERA_ORDER_C);
  CHECK(rc == 0 && memcmp(again, got, sizeof got) == 0, "the saved file does not hold the trained weights");
  tessera_model_destroy(&reloaded);
  tessera_model_destroy(&model);
}

/* The field model split over rows (the remainder on the last rank), two SGD steps on the
 * whole field's mean, against the model trained alone on the whole field. */
static void check_split_step(tessera_mesh_t* mesh, const char* field_path) {
  enum { C = 2, H = 7, W = 8 };
  double x[C][H][W], t[C][H][W];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < H; ++i)
      for (int j = 0; j < W; ++j) {
        x[c][i][j] = sin(0.3 * i + 0.7 * j + c);
        t[c][i][j] = 0.5 * cos(0.2 * i - 0.4 * j + c);
      }
  const int64_t shape[4] = {1, C, H, W};
  tessera_mesh_t* self = NULL;
  CHECK(tessera_mesh_create(MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1, &self) == 0, "self mesh: %s", tessera_last_error());
  tessera_model_t* whole = NULL;
  CHECK(tessera_model_load_onnx(self, field_path, &whole) == 0, "load whole: %s", tessera_last_error());
  double whole_loss[2];
  for (int k = 0; k < 2; ++k) {
    CHECK(tessera_model_onnx_train_step(whole, x, 4, shape, t, 4, shape, TESSERA_F64, TESSERA_ORDER_C,
                                        TESSERA_OPTIMIZER_ADAMW, 0.05, &whole_loss[k]) == 0,
          "whole step: %s", tessera_last_error());
  }
  double y_whole[C][H][W];
  CHECK(tessera_model_run(whole, x, 4, shape, y_whole, 4, shape, TESSERA_F64, TESSERA_ORDER_C) == 0, "whole run");

  const int64_t rows = H / size, first = rank * rows, count = rank == size - 1 ? H - first : rows;
  tessera_decomp_t* decomp = NULL;
  CHECK(tessera_decomp_create_boxes(MPI_COMM_WORLD, H, W, first, count, 0, W, &decomp) == 0, "boxes: %s",
        tessera_last_error());
  tessera_model_t* model = NULL;
  CHECK(tessera_model_load_onnx(mesh, field_path, &model) == 0, "load field: %s", tessera_last_error());
  CHECK(tessera_model_split_onnx(model, decomp) == 0, "split: %s", tessera_last_error());
  const int64_t local[4] = {1, C, count, W};
  double bx[C * H * W], bt[C * H * W], by[C * H * W];
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < count * W; ++k) {
      bx[c * count * W + k] = x[c][first + k / W][k % W];
      bt[c * count * W + k] = t[c][first + k / W][k % W];
    }
  for (int k = 0; k < 2; ++k) {
    double loss = -1;
    int rc = tessera_model_onnx_train_step(model, bx, 4, local, bt, 4, local, TESSERA_F64, TESSERA_ORDER_C,
                                           TESSERA_OPTIMIZER_ADAMW, 0.05, &loss);
    CHECK(rc == 0 && fabs(loss - whole_loss[k]) < 1e-13 * whole_loss[k], "split step %d: rc %d, loss %.17g vs %.17g %s",
          k + 1, rc, loss, whole_loss[k], tessera_last_error());
  }
  CHECK(tessera_model_run(model, bx, 4, local, by, 4, local, TESSERA_F64, TESSERA_ORDER_C) == 0, "split run");
  double worst = 0;
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < count * W; ++k) worst = fmax(worst, fabs(by[c * count * W + k] - y_whole[c][first + k / W][k % W]));
  CHECK(worst < 1e-12, "the split model trained off the whole one by %g", worst);
  tessera_model_destroy(&model);
  tessera_decomp_destroy(&decomp);
  tessera_model_destroy(&whole);
  tessera_mesh_destroy(&self);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4) {
    fprintf(stderr, "usage: test_capi_onnx_train MLP.onnx FIELD.onnx SAVED.onnx\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  tessera_mesh_t* mesh = NULL;
  CHECK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, &mesh) == 0, "mesh: %s", tessera_last_error());
  check_mlp_step(mesh, argv[1], argv[3]);
  check_split_step(mesh, argv[2]);
  tessera_mesh_destroy(&mesh);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf(total == 0 ? "PASSED\n" : "FAILED: %d checks\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
