/* The redistribution plan from C (tessera_redist_*): the code's 2x2 blocks at 4 ranks
 * (latitude bands at 1-3) to a model on M = 1 and 2 ranks in latitude bands, and to a
 * rank list; an f32 field with levels (C order), an f64 field (Fortran order) and a
 * second f64 field in one transfer. Every model cell equals the global field's, a round
 * trip is bit-exact, the model's changes come back; blocking and start/finish. Errors:
 * M > N, a duplicate in the rank list, a model grid that does not hold the model ranks,
 * a NULL model array on a model rank, fields registered on one rank only, each the same
 * status on every rank (no rank left waiting), naming the argument. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "tessera/tessera.h"

enum { NLEV = 3, NLAT = 9, NLON = 10 };

static double value(int field, int lev, int64_t i, int64_t j) {
  return 1000.0 * field + 100.0 * lev + 10.0 * (double)i + 0.5 * (double)j + 0.25;
}

/* Arrays of one rank: an f32 (NLEV, lat, lon) C-order field and two f64 Fortran-order
 * (lon, lat) fields, over a box. */
struct fields {
  float* t;
  double* u;
  double* v;
};

static struct fields alloc_fields(int64_t nlat, int64_t nlon) {
  struct fields f;
  f.t = calloc((size_t)(NLEV * nlat * nlon) + 1, sizeof(float));
  f.u = calloc((size_t)(nlat * nlon) + 1, sizeof(double));
  f.v = calloc((size_t)(nlat * nlon) + 1, sizeof(double));
  return f;
}

static void free_fields(struct fields* f) {
  free(f->t);
  free(f->u);
  free(f->v);
}

/* Fills (or checks, returning mismatches) the fields over box (ls, lc, os, oc). */
static int fill(struct fields* f, int64_t ls, int64_t lc, int64_t os, int64_t oc, double sign, int check) {
  int bad = 0;
  for (int k = 0; k < NLEV; ++k)
    for (int64_t i = 0; i < lc; ++i)
      for (int64_t j = 0; j < oc; ++j) {
        const float want = (float)(sign * value(0, k, ls + i, os + j));
        float* p = &f->t[(k * lc + i) * oc + j];
        if (check) bad += *p != want; else *p = want;
      }
  for (int64_t i = 0; i < lc; ++i)
    for (int64_t j = 0; j < oc; ++j) {
      double* u = &f->u[i * oc + j]; /* u(lon, lat): lon fastest */
      double* v = &f->v[i * oc + j];
      const double wu = sign * value(1, 0, ls + i, os + j), wv = sign * value(2, 0, ls + i, os + j);
      if (check) bad += (*u != wu) + (*v != wv); else { *u = wu; *v = wv; }
    }
  return bad;
}

static void register_fields(tessera_redist_t* r, struct fields* code, struct fields* model, int64_t lc, int64_t oc) {
  const int64_t t_shape[3] = {NLEV, lc, oc};
  const int64_t u_shape[2] = {oc, lc}; /* Fortran: (lon, lat) */
  int index = -1;
  CHECK(tessera_redist_add_field(r, code->t, model->t, TESSERA_F32, TESSERA_ORDER_C, 3, t_shape, &index) == TESSERA_OK &&
            index == 0, "add t");
  CHECK(tessera_redist_add_field(r, code->u, model->u, TESSERA_F64, TESSERA_ORDER_FORTRAN, 2, u_shape, NULL) ==
            TESSERA_OK, "add u");
  CHECK(tessera_redist_add_field(r, code->v, model->v, TESSERA_F64, TESSERA_ORDER_FORTRAN, 2, u_shape, &index) ==
            TESSERA_OK && index == 2, "add v");
}

static void round_trip(tessera_decomp_t* d, int nmodel, const int* ranks, int split) {
  int64_t ls, lc, os, oc, ms, mc, ns, nc;
  tessera_decomp_box(d, &ls, &lc, &os, &oc);
  tessera_redist_t* r = NULL;
  CHECK(tessera_redist_create(d, nmodel, ranks, 0, 0, 1, &r) == TESSERA_OK, "create M = %d", nmodel);
  if (r == NULL) return;
  int m = -2, size = 0;
  tessera_redist_model_rank(r, &m);
  tessera_redist_model_size(r, &size);
  CHECK(size == nmodel, "model size %d", size);
  CHECK(tessera_redist_model_box(r, &ms, &mc, &ns, &nc) == TESSERA_OK, "model box");
  MPI_Comm mcomm = MPI_COMM_NULL;
  tessera_redist_model_comm(r, &mcomm);
  CHECK((m >= 0) == (mcomm != MPI_COMM_NULL), "model comm on model rank %d", m);
  if (m >= 0) CHECK(mc > 0 && nc == NLON, "model box %lld x %lld", (long long)mc, (long long)nc);
  if (m < 0) CHECK(mc == 0 && nc == 0, "empty box off the model");

  struct fields code = alloc_fields(lc, oc), back = alloc_fields(lc, oc), model = alloc_fields(mc, nc);
  fill(&code, ls, lc, os, oc, 1.0, 0);
  register_fields(r, &code, &model, lc, oc);
  if (split) {
    int flying = 0;
    CHECK(tessera_redist_start_to_model(r) == TESSERA_OK, "start_to_model");
    tessera_redist_in_flight(r, &flying);
    CHECK(flying == 1, "in flight");
    CHECK(tessera_redist_finish(r) == TESSERA_OK, "finish");
  } else {
    CHECK(tessera_redist_to_model(r) == TESSERA_OK, "to_model");
  }
  if (m >= 0) CHECK(fill(&model, ms, mc, ns, nc, 1.0, 1) == 0, "model rank %d: cells differ from the global field", m);
  /* The model changes its fields; they come back into the code's (other) arrays. */
  if (m >= 0) fill(&model, ms, mc, ns, nc, -1.0, 0);
  tessera_redist_clear_fields(r);
  register_fields(r, &back, &model, lc, oc);
  CHECK(tessera_redist_to_code(r) == TESSERA_OK, "to_code");
  CHECK(fill(&back, ls, lc, os, oc, -1.0, 1) == 0, "model -> code: cells differ");
  /* Round trip of the untouched values: bit-exact. */
  tessera_redist_clear_fields(r);
  register_fields(r, &code, &model, lc, oc);
  CHECK(tessera_redist_to_model(r) == TESSERA_OK, "to_model again");
  tessera_redist_clear_fields(r);
  register_fields(r, &back, &model, lc, oc);
  CHECK(tessera_redist_start_to_code(r) == TESSERA_OK && tessera_redist_finish(r) == TESSERA_OK, "to_code again");
  CHECK(memcmp(back.t, code.t, sizeof(float) * (size_t)(NLEV * lc * oc)) == 0 &&
            memcmp(back.u, code.u, sizeof(double) * (size_t)(lc * oc)) == 0 &&
            memcmp(back.v, code.v, sizeof(double) * (size_t)(lc * oc)) == 0,
        "round trip not exact");
  free_fields(&code);
  free_fields(&back);
  free_fields(&model);
  CHECK(tessera_redist_destroy(&r) == TESSERA_OK && r == NULL, "destroy");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tessera_decomp_t* d = NULL;
  const int glat = size == 4 ? 2 : size, glon = size == 4 ? 2 : 1;
  CHECK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, glat, glon, &d) == TESSERA_OK, "decomp");

  for (int m = 1; m <= 2 && m <= size; ++m) {
    round_trip(d, m, NULL, 0);
    round_trip(d, m, NULL, 1);
  }
  {
    int list[2] = {size - 1, 0};
    round_trip(d, size >= 2 ? 2 : 1, list, 0);
  }

  /* Errors: the same status on every rank, naming the argument. */
  tessera_redist_t* r = NULL;
  CHECK(tessera_redist_create(d, size + 1, NULL, 0, 0, 1, &r) == TESSERA_ERR_INVALID_ARGUMENT && r == NULL, "M > N");
  CHECK(strstr(tessera_last_error(), "M > N") != NULL, "message names M > N");
  {
    int dup[2] = {0, 0};
    /* At one rank the list is also longer than the communicator. */
    CHECK(tessera_redist_create(d, 2, dup, 0, 0, 1, &r) == TESSERA_ERR_INVALID_ARGUMENT, "duplicate rank list");
    CHECK(strstr(tessera_last_error(), size >= 2 ? "twice" : "M > N") != NULL, "message names the duplicate");
  }
  CHECK(tessera_redist_create(d, 1, NULL, 2, 1, 1, &r) == TESSERA_ERR_INVALID_ARGUMENT, "grid 2x1 for M = 1");
  CHECK(strstr(tessera_last_error(), "model grid 2 (lat) x 1 (lon)") != NULL, "message names the model grid");
  /* A count on one rank that differs from the others'. */
  if (size >= 2) {
    CHECK(tessera_redist_create(d, rank == size - 1 ? 2 : 1, NULL, 0, 0, 1, &r) == TESSERA_ERR_INVALID_ARGUMENT,
          "ranks disagree");
  }
  CHECK(tessera_redist_create(d, 1, NULL, 0, 0, 1, &r) == TESSERA_OK, "create");
  int m = -1;
  tessera_redist_model_rank(r, &m);
  int64_t ls, lc, os, oc;
  tessera_decomp_box(d, &ls, &lc, &os, &oc);
  double* code = calloc((size_t)(lc * oc), sizeof(double));
  double* whole = calloc((size_t)(NLAT * NLON), sizeof(double));
  const int64_t shape[2] = {lc, oc};
  /* A NULL model array on the model rank: a local error at registration. */
  CHECK(tessera_redist_add_field(r, code, NULL, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL) ==
            (m >= 0 ? TESSERA_ERR_INVALID_ARGUMENT : TESSERA_OK), "NULL model array");
  if (m >= 0) CHECK(strstr(tessera_last_error(), "model array is NULL") != NULL, "message names the model array");
  /* ...so the ranks hold different fields: the transfer fails everywhere, none hangs. */
  if (size >= 2) {
    CHECK(tessera_redist_to_model(r) == TESSERA_ERR_INVALID_ARGUMENT, "different field counts");
  }
  tessera_redist_clear_fields(r);
  CHECK(tessera_redist_add_field(r, code, whole, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL) == TESSERA_OK, "add");
  const int64_t wrong[2] = {lc + 1, oc};
  CHECK(tessera_redist_add_field(r, code, whole, TESSERA_F64, TESSERA_ORDER_C, 2, wrong, NULL) == TESSERA_ERR_SHAPE,
        "a code array that is not the box");
  CHECK(tessera_redist_to_model(r) == TESSERA_OK, "to_model after a rejected registration");
  CHECK(tessera_redist_finish(r) == TESSERA_ERR_INVALID_ARGUMENT, "finish with nothing in flight");
  tessera_redist_destroy(&r);
  /* (After the destroy: a failed create sets its handle to NULL, which would lose a live one.) */
  CHECK(tessera_redist_create(NULL, 1, NULL, 0, 0, 1, &r) == TESSERA_ERR_INVALID_ARGUMENT, "NULL decomposition");
  CHECK(r == NULL, "a failed create leaves NULL");
  CHECK(tessera_redist_destroy(&r) == TESSERA_OK, "destroy NULL");
  free(code);
  free(whole);
  tessera_decomp_destroy(&d);

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_coupling: %d ranks, %d failed checks\n", size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
