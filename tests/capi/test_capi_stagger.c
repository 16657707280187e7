/* C-grid staggering from C: in one halo, a scalar at the cell centres, u on the east
 * faces (TESSERA_STAGGER_LON_FACE) and v on the latitude faces (TESSERA_STAGGER_LAT_FACE),
 * u and v flagged as a vector pair. Each is scattered from a serial field on rank 0
 * (tessera_halo_scatter_staggered), exchanged, every halo cell compared with a serial
 * reference computed from the faces' positions on the sphere, and gathered back; the
 * adjoint of the exchange is its transpose (dot-product identity). Every pole policy,
 * f64 and f32, latitude bands, longitude bands and 2 x 2 at 1, 2, 3 and 4 ranks. The
 * face fields in two other memory orders (strided) against the reference order (their
 * scatter and gather against the serial global arrays in the same orders), and a
 * checkpoint of them written at every decomposition loaded at one rank (run_orders). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "tessera/tessera.h"

enum { NLAT = 11, NLON = 8, LEAD = 2, NFIELDS = 3 };

static const tessera_stagger_t staggers[NFIELDS] = {TESSERA_STAGGER_NONE, TESSERA_STAGGER_LON_FACE,
                                                    TESSERA_STAGGER_LAT_FACE};

static double encode(int64_t l, int64_t i, int64_t j) { return 1.0 + 10000.0 * (double)l + 100.0 * (double)i + (double)j; }

/* Positions in half-cell units: latitude from the north pole (0) to the south pole, cell
 * rows at 2i + 1 and their faces at 2f (rows bounded by the poles) or pole-point rows at
 * 2i and faces at 2f + 1; longitude: centres at 2j + 1, east faces at 2j + 2. */
typedef struct {
  int points;                  /* pole-point rows (TESSERA_POLE_ACROSS_POLE_POINT) */
  tessera_stagger_t stagger;
} geometry;

static int64_t south(const geometry* g) { return g->points ? 2 * (NLAT - 1) : 2 * NLAT; }
static int odd_rows(const geometry* g) { return (g->stagger == TESSERA_STAGGER_LAT_FACE) == g->points; }
static int64_t lat_pos(const geometry* g, int64_t i) { return 2 * i + (odd_rows(g) ? 1 : 0); }
static int64_t lat_index(const geometry* g, int64_t p) { return odd_rows(g) ? (p - 1) / 2 : p / 2; }
static int64_t lon_pos(const geometry* g, int64_t j) { return 2 * j + (g->stagger == TESSERA_STAGGER_LON_FACE ? 2 : 1); }
static int64_t lon_index(const geometry* g, int64_t q) {
  q = ((q % (2 * NLON)) + 2 * NLON) % (2 * NLON);
  return g->stagger == TESSERA_STAGGER_LON_FACE ? ((q - 2 + 2 * NLON) % (2 * NLON)) / 2 : (q - 1) / 2;
}

/* The serial value of halo cell (i, j); *beyond says whether it lies beyond a pole. */
static double reference(const geometry* g, tessera_pole_t pole, int64_t nlat, int64_t l, int64_t i, int64_t j,
                        int* beyond) {
  int64_t p = lat_pos(g, i), q = lon_pos(g, j), si = i;
  *beyond = p < 0 || p > south(g);
  if (*beyond) {
    if (pole == TESSERA_POLE_ZERO) return 0.0;
    if (pole == TESSERA_POLE_REPLICATE) {
      si = p < 0 ? 0 : nlat - 1;
    } else {
      p = p < 0 ? -p : 2 * south(g) - p;
      q += NLON;
      si = lat_index(g, p);
    }
  }
  return encode(l, si, lon_index(g, q));
}

static double value(const void* data, int f32, int64_t k) {
  return f32 ? (double)((const float*)data)[k] : ((const double*)data)[k];
}
static void set_value(void* data, int f32, int64_t k, double x) {
  if (f32) {
    ((float*)data)[k] = (float)x;
  } else {
    ((double*)data)[k] = x;
  }
}

static void run(tessera_decomp_t* d, tessera_pole_t pole, int f32, int rank, const char* layout) {
  const tessera_dtype_t dtype = f32 ? TESSERA_F32 : TESSERA_F64;
  const size_t size = f32 ? sizeof(float) : sizeof(double);
  tessera_halo_t* h = NULL;
  CHECK(tessera_halo_create(d, 2, 1, 1, 2, 1, pole, &h) == TESSERA_OK, "halo: %s", tessera_last_error());
  void* fields[NFIELDS];
  int64_t pl[NFIELDS], pn[NFIELDS], gl[NFIELDS], gn[NFIELDS], ls[NFIELDS], lc[NFIELDS], os[NFIELDS], oc[NFIELDS];
  int index[NFIELDS];
  for (int k = 0; k < NFIELDS; ++k) {
    const geometry g = {pole == TESSERA_POLE_ACROSS_POLE_POINT, staggers[k]};
    CHECK(tessera_halo_padded_staggered(h, staggers[k], &pl[k], &pn[k]) == TESSERA_OK, "padded: %s",
          tessera_last_error());
    CHECK(tessera_halo_box_staggered(h, staggers[k], &gl[k], &gn[k], &ls[k], &lc[k], &os[k], &oc[k]) == TESSERA_OK,
          "box: %s", tessera_last_error());
    const int64_t want_lat = k < 2 ? NLAT : (g.points ? NLAT - 1 : NLAT + 1);
    CHECK(gl[k] == want_lat && gn[k] == NLON, "%s field %d: global %lld x %lld", layout, k, (long long)gl[k],
          (long long)gn[k]);
    fields[k] = calloc((size_t)(LEAD * pl[k] * pn[k]), size);
    const int64_t shape[3] = {LEAD, pl[k], pn[k]};
    CHECK(tessera_halo_add_field_staggered(h, fields[k], dtype, TESSERA_ORDER_C, 3, shape, staggers[k], &index[k]) ==
              TESSERA_OK,
          "add: %s", tessera_last_error());
    /* The serial field on root, scattered into the interiors. */
    void* global = calloc((size_t)(LEAD * gl[k] * NLON), size);
    for (int64_t l = 0; l < LEAD; ++l)
      for (int64_t i = 0; i < gl[k]; ++i)
        for (int64_t j = 0; j < NLON; ++j) set_value(global, f32, (l * gl[k] + i) * NLON + j, encode(l, i, j));
    CHECK(tessera_halo_scatter_staggered(h, global, fields[k], dtype, TESSERA_ORDER_C, 3, shape, staggers[k], 0) ==
              TESSERA_OK,
          "scatter: %s", tessera_last_error());
    free(global);
  }
  /* A wrong shape: the cells' padded extents for v (different on the last band). */
  if (pl[0] != pl[2]) {
    const int64_t wrong[3] = {LEAD, pl[0], pn[0]};
    CHECK(tessera_halo_add_field_staggered(h, fields[0], dtype, TESSERA_ORDER_C, 3, wrong, TESSERA_STAGGER_LAT_FACE,
                                           NULL) == TESSERA_ERR_SHAPE,
          "v with the cells' extents accepted");
  }
  CHECK(tessera_halo_add_field_staggered(h, fields[0], dtype, TESSERA_ORDER_C, 1, pl, (tessera_stagger_t)7, NULL) ==
            TESSERA_ERR_INVALID_ARGUMENT,
        "stagger 7 accepted");
  CHECK(tessera_halo_set_vector_pair(h, index[1], index[2]) == TESSERA_OK, "pair: %s", tessera_last_error());
  CHECK(tessera_halo_exchange(h) == TESSERA_OK, "exchange: %s", tessera_last_error());
  const int mirrors = pole == TESSERA_POLE_ACROSS_POLE || pole == TESSERA_POLE_ACROSS_POLE_POINT;
  for (int k = 0; k < NFIELDS; ++k) {
    const geometry g = {pole == TESSERA_POLE_ACROSS_POLE_POINT, staggers[k]};
    int errors = 0;
    for (int64_t l = 0; l < LEAD; ++l)
      for (int64_t a = 0; a < pl[k]; ++a)
        for (int64_t b = 0; b < pn[k]; ++b) {
          const int64_t i = ls[k] - 2 + a, j = os[k] - 1 + b;
          int beyond = 0;
          double want = reference(&g, pole, gl[k], l, i, j, &beyond);
          if (beyond && mirrors && k > 0) want = -want; /* u and v: a vector pair */
          const double got = value(fields[k], f32, (l * pl[k] + a) * pn[k] + b);
          if (got != want && errors++ < 3) {
            fprintf(stderr, "%s pole %d f32 %d field %d rank %d (%lld, %lld, %lld): %g != %g\n", layout, (int)pole,
                    f32, k, rank, (long long)l, (long long)i, (long long)j, got, want);
          }
        }
    CHECK(errors == 0, "%s pole %d f32 %d field %d: %d wrong halo cells", layout, (int)pole, f32, k, errors);
    /* Gathered back, the serial field. */
    void* global = calloc((size_t)(LEAD * gl[k] * NLON), size);
    const int64_t shape[3] = {LEAD, pl[k], pn[k]};
    CHECK(tessera_halo_gather_staggered(h, fields[k], global, dtype, TESSERA_ORDER_C, 3, shape, staggers[k], 0) ==
              TESSERA_OK,
          "gather: %s", tessera_last_error());
    if (rank == 0) {
      int wrong = 0;
      for (int64_t l = 0; l < LEAD; ++l)
        for (int64_t i = 0; i < gl[k]; ++i)
          for (int64_t j = 0; j < NLON; ++j) wrong += value(global, f32, (l * gl[k] + i) * NLON + j) != encode(l, i, j);
      CHECK(wrong == 0, "%s field %d: %d gathered values differ", layout, k, wrong);
    }
    free(global);
  }
  /* Transpose: <A x, y> = <x, A^T y> over the three fields (vector pair included). */
  double sums[2] = {0, 0};
  double* x[NFIELDS];
  double* y[NFIELDS];
  unsigned seed = 29u + (unsigned)rank;
  for (int k = 0; k < NFIELDS; ++k) {
    const int64_t n = LEAD * pl[k] * pn[k];
    x[k] = malloc(sizeof(double) * (size_t)n);
    y[k] = malloc(sizeof(double) * (size_t)n);
    for (int64_t e = 0; e < n; ++e) {
      seed = seed * 1103515245u + 12345u;
      x[k][e] = (double)(seed >> 8) / 16777216.0 - 0.5; /* exact in f32 */
      seed = seed * 1103515245u + 12345u;
      y[k][e] = (double)(seed >> 8) / 16777216.0 - 0.5;
      set_value(fields[k], f32, e, x[k][e]);
    }
  }
  CHECK(tessera_halo_exchange(h) == TESSERA_OK, "exchange: %s", tessera_last_error());
  for (int k = 0; k < NFIELDS; ++k)
    for (int64_t e = 0; e < LEAD * pl[k] * pn[k]; ++e) {
      sums[0] += value(fields[k], f32, e) * y[k][e];
      set_value(fields[k], f32, e, y[k][e]);
    }
  CHECK(tessera_halo_start_adjoint(h) == TESSERA_OK, "start adjoint: %s", tessera_last_error());
  int in_flight = 0;
  tessera_halo_in_flight(h, &in_flight);
  CHECK(in_flight == 1, "not in flight after start_adjoint");
  CHECK(tessera_halo_finish_adjoint(h) == TESSERA_OK, "finish adjoint: %s", tessera_last_error());
  for (int k = 0; k < NFIELDS; ++k)
    for (int64_t e = 0; e < LEAD * pl[k] * pn[k]; ++e) sums[1] += x[k][e] * value(fields[k], f32, e);
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double tol = f32 ? 1e-5 : 1e-12;
  CHECK(fabs(sums[0] - sums[1]) <= tol * fmax(1.0, fabs(sums[0])), "%s pole %d f32 %d: <Ax,y> %.17g != <x,A^T y> %.17g",
        layout, (int)pole, f32, sums[0], sums[1]);
  for (int k = 0; k < NFIELDS; ++k) {
    free(x[k]);
    free(y[k]);
    free(fields[k]);
  }
  tessera_halo_destroy(&h);
}

/* Memory orders of a (LEAD, lat, lon) field: 0 the reference (l, i, j) in C order, 1
 * (i, l, j) and 2 (i, j, l): q(j, k, i) and q(k, j, i) in Fortran terms. The strides of
 * tessera's view (LEAD, padded lat, padded lon) in each. */
static void strides_of(int order, int64_t pl, int64_t pn, int64_t st[3]) {
  const int64_t all[3][3] = {{pl * pn, pn, 1}, {pn, LEAD * pn, 1}, {1, pn * LEAD, LEAD}};
  memcpy(st, all[order], sizeof(all[order]));
}
static int64_t at(const int64_t st[3], int64_t l, int64_t a, int64_t b) { return l * st[0] + a * st[1] + b * st[2]; }

static int has(const char* text) { return strstr(tessera_last_error(), text) != NULL; }

/* Scatter and gather in memory order `order` (tessera_halo_scatter/gather_staggered_strided):
 * root's global array in that order, encode() at every face, scattered into a zeroed field
 * gives `expected` (the same field scattered in the reference order, copied into this
 * order) on every cell, halo included, and gathered back it is the global array again. A
 * global array one latitude too long on the root fails every rank with TESSERA_ERR_SHAPE. */
static void scatter_gather_strided(tessera_halo_t* h, tessera_stagger_t face, int order, int64_t pl, int64_t pn,
                                   int64_t gl, const double* expected, int rank) {
  const int64_t n = LEAD * pl * pn, shape[3] = {LEAD, pl, pn}, gshape[3] = {LEAD, gl, NLON};
  int64_t st[3], gst[3];
  strides_of(order, pl, pn, st);
  strides_of(order, gl, NLON, gst);
  double* field = calloc((size_t)n, sizeof(double));
  double* global = calloc((size_t)(LEAD * gl * NLON), sizeof(double));
  double* back = calloc((size_t)(LEAD * gl * NLON), sizeof(double));
  for (int64_t l = 0; l < LEAD; ++l)
    for (int64_t i = 0; i < gl; ++i)
      for (int64_t j = 0; j < NLON; ++j) global[at(gst, l, i, j)] = encode(l, i, j);
  CHECK(tessera_halo_scatter_staggered_strided(h, global, gshape, gst, field, TESSERA_F64, 3, shape, st, face, 0) ==
            TESSERA_OK,
        "strided scatter, order %d: %s", order, tessera_last_error());
  int wrong = 0;
  for (int64_t e = 0; e < n; ++e) wrong += field[e] != expected[e];
  CHECK(wrong == 0, "strided scatter, order %d, stagger %d: %d values differ", order, (int)face, wrong);
  CHECK(tessera_halo_gather_staggered_strided(h, field, back, TESSERA_F64, 3, shape, st, gshape, gst, face, 0) ==
            TESSERA_OK,
        "strided gather, order %d: %s", order, tessera_last_error());
  wrong = 0;
  if (rank == 0)
    for (int64_t e = 0; e < LEAD * gl * NLON; ++e) wrong += back[e] != global[e];
  CHECK(wrong == 0, "strided gather, order %d, stagger %d: %d values differ", order, (int)face, wrong);
  const int64_t longer[3] = {LEAD, gl + 1, NLON};
  double* bad = calloc((size_t)(LEAD * (gl + 1) * NLON), sizeof(double));
  int64_t bst[3];
  strides_of(order, gl + 1, NLON, bst);
  CHECK(tessera_halo_gather_staggered_strided(h, field, bad, TESSERA_F64, 3, shape, st, longer, bst, face, 0) ==
                TESSERA_ERR_SHAPE &&
            has("are not the field's global extents"),
        "gather into a global array one latitude too long: %s", tessera_last_error());
  free(bad);
  free(back);
  free(global);
  free(field);
}

/* Face fields in other memory orders (tessera_halo_add_field_staggered_strided) exchange
 * to the reference order's values on every halo cell; a checkpoint of them written here
 * (tessera_checkpoint_add_halo_field_staggered[_strided]) loads on rank 0 alone, one
 * 1 x 1 decomposition, into the global face arrays. */
static void run_orders(tessera_decomp_t* d, tessera_pole_t pole, int rank, int size, int step, const char* layout) {
  enum { NF = 2, NORDERS = 3 };
  const tessera_stagger_t faces[NF] = {TESSERA_STAGGER_LON_FACE, TESSERA_STAGGER_LAT_FACE};
  tessera_halo_t* h = NULL;
  CHECK(tessera_halo_create(d, 2, 1, 1, 2, 1, pole, &h) == TESSERA_OK, "halo: %s", tessera_last_error());
  double* q[NF][NORDERS];
  int64_t pl[NF], pn[NF], st[NF][NORDERS][3], gl[NF], gn, ls, lc, os, oc, cl, cn;
  CHECK(tessera_halo_padded(h, &cl, &cn) == TESSERA_OK, "padded: %s", tessera_last_error());
  for (int k = 0; k < NF; ++k) {
    CHECK(tessera_halo_padded_staggered(h, faces[k], &pl[k], &pn[k]) == TESSERA_OK, "padded: %s",
          tessera_last_error());
    CHECK(tessera_halo_box_staggered(h, faces[k], &gl[k], &gn, &ls, &lc, &os, &oc) == TESSERA_OK, "box: %s",
          tessera_last_error());
    const int64_t n = LEAD * pl[k] * pn[k], shape[3] = {LEAD, pl[k], pn[k]};
    for (int o = 0; o < NORDERS; ++o) {
      q[k][o] = calloc((size_t)n, sizeof(double));
      strides_of(o, pl[k], pn[k], st[k][o]);
    }
    double* global = calloc((size_t)(LEAD * gl[k] * NLON), sizeof(double));
    for (int64_t e = 0; e < LEAD * gl[k] * NLON; ++e) global[e] = encode(e / (gl[k] * NLON), e / NLON % gl[k], e % NLON);
    CHECK(tessera_halo_scatter_staggered(h, global, q[k][0], TESSERA_F64, TESSERA_ORDER_C, 3, shape, faces[k], 0) ==
              TESSERA_OK,
          "scatter: %s", tessera_last_error());
    free(global);
    for (int o = 1; o < NORDERS; ++o)
      for (int64_t l = 0; l < LEAD; ++l)
        for (int64_t a = 0; a < pl[k]; ++a)
          for (int64_t b = 0; b < pn[k]; ++b) q[k][o][at(st[k][o], l, a, b)] = q[k][0][at(st[k][0], l, a, b)];
    for (int o = 1; o < NORDERS; ++o) scatter_gather_strided(h, faces[k], o, pl[k], pn[k], gl[k], q[k][o], rank);
    CHECK(tessera_halo_add_field_staggered(h, q[k][0], TESSERA_F64, TESSERA_ORDER_C, 3, shape, faces[k], NULL) ==
              TESSERA_OK,
          "add: %s", tessera_last_error());
    for (int o = 1; o < NORDERS; ++o) {
      CHECK(tessera_halo_add_field_staggered_strided(h, q[k][o], TESSERA_F64, 3, shape, st[k][o], faces[k], NULL) ==
                TESSERA_OK,
            "add strided: %s", tessera_last_error());
    }
  }
  /* Errors name the argument: a stagger that is none, latitude faces with the cells'
   * extents (they differ on the southernmost band). */
  const int64_t cells[3] = {LEAD, cl, cn};
  CHECK(tessera_halo_add_field_staggered_strided(h, q[0][1], TESSERA_F64, 3, cells, st[0][1], (tessera_stagger_t)7,
                                                 NULL) == TESSERA_ERR_INVALID_ARGUMENT &&
            has("stagger 7"),
        "stagger 7: %s", tessera_last_error());
  if (cl != pl[1]) {
    int fields = 0;
    tessera_halo_num_fields(h, &fields);
    char label[32];
    snprintf(label, sizeof label, "field %d:", fields);
    CHECK(tessera_halo_add_field_staggered_strided(h, q[0][1], TESSERA_F64, 3, cells, st[0][1],
                                                   TESSERA_STAGGER_LAT_FACE, NULL) == TESSERA_ERR_SHAPE &&
              has(label),
          "v with the cells' extents: %s", tessera_last_error());
  }
  CHECK(tessera_halo_exchange(h) == TESSERA_OK, "exchange: %s", tessera_last_error());
  for (int k = 0; k < NF; ++k)
    for (int o = 1; o < NORDERS; ++o) {
      int wrong = 0;
      for (int64_t l = 0; l < LEAD; ++l)
        for (int64_t a = 0; a < pl[k]; ++a)
          for (int64_t b = 0; b < pn[k]; ++b) wrong += q[k][o][at(st[k][o], l, a, b)] != q[k][0][at(st[k][0], l, a, b)];
      CHECK(wrong == 0, "%s pole %d stagger %d order %d: %d cells differ from the reference order", layout, (int)pole,
            (int)faces[k], o, wrong);
    }

  /* The checkpoint: u in the reference order, v in order 2. */
  char root[64];
  snprintf(root, sizeof root, "stagger_checkpoint_np%d", size);
  tessera_mesh_t* mesh = NULL;
  tessera_checkpoint_t* c = NULL;
  CHECK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, size, &mesh) == TESSERA_OK, "mesh: %s",
        tessera_last_error());
  CHECK(tessera_checkpoint_begin_save(mesh, root, step, TESSERA_LAYOUT_SHARED, &c) == TESSERA_OK, "save: %s",
        tessera_last_error());
  const int64_t ushape[3] = {LEAD, pl[0], pn[0]}, vshape[3] = {LEAD, pl[1], pn[1]};
  CHECK(tessera_checkpoint_add_halo_field_staggered(c, "u", h, q[0][0], TESSERA_F64, TESSERA_ORDER_C, 3, ushape,
                                                    faces[0]) == TESSERA_OK,
        "add u: %s", tessera_last_error());
  CHECK(tessera_checkpoint_add_halo_field_staggered_strided(c, "v", h, q[1][2], TESSERA_F64, 3, vshape, st[1][2],
                                                            faces[1]) == TESSERA_OK,
        "add v: %s", tessera_last_error());
  CHECK(tessera_checkpoint_add_halo_field_staggered(c, "w", h, q[0][0], TESSERA_F64, TESSERA_ORDER_C, 3, ushape,
                                                    (tessera_stagger_t)7) == TESSERA_ERR_INVALID_ARGUMENT &&
            has("stagger 7"),
        "checkpoint stagger 7: %s", tessera_last_error());
  if (cl != pl[1]) {
    CHECK(tessera_checkpoint_add_halo_field_staggered_strided(c, "v2", h, q[1][2], TESSERA_F64, 3, cells, st[1][2],
                                                              faces[1]) == TESSERA_ERR_SHAPE &&
              has("array 'v2'"),
          "checkpoint v with the cells' extents: %s", tessera_last_error());
  }
  CHECK(tessera_checkpoint_commit(c) == TESSERA_OK, "commit: %s", tessera_last_error());
  tessera_checkpoint_destroy(&c);
  tessera_mesh_destroy(&mesh);
  for (int k = 0; k < NF; ++k)
    for (int o = 0; o < NORDERS; ++o) free(q[k][o]);
  tessera_halo_destroy(&h);

  if (rank == 0) {
    /* One rank, one box: u in order 1, v in the reference order. */
    tessera_decomp_t* d1 = NULL;
    tessera_halo_t* h1 = NULL;
    CHECK(tessera_mesh_create(MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1, &mesh) == TESSERA_OK, "mesh: %s",
          tessera_last_error());
    CHECK(tessera_decomp_create(MPI_COMM_SELF, NLAT, NLON, 1, 1, &d1) == TESSERA_OK, "decomp: %s",
          tessera_last_error());
    CHECK(tessera_halo_create(d1, 1, 2, 2, 1, 1, pole, &h1) == TESSERA_OK, "halo: %s", tessera_last_error());
    CHECK(tessera_checkpoint_begin_load(mesh, root, &c) == TESSERA_OK, "load: %s", tessera_last_error());
    const int order[NF] = {1, 0};
    double* r[NF];
    for (int k = 0; k < NF; ++k) {
      CHECK(tessera_halo_padded_staggered(h1, faces[k], &pl[k], &pn[k]) == TESSERA_OK, "padded: %s",
            tessera_last_error());
      CHECK(tessera_halo_box_staggered(h1, faces[k], &gl[k], &gn, &ls, &lc, &os, &oc) == TESSERA_OK, "box: %s",
            tessera_last_error());
      r[k] = calloc((size_t)(LEAD * pl[k] * pn[k]), sizeof(double));
      strides_of(order[k], pl[k], pn[k], st[k][0]);
      const int64_t shape[3] = {LEAD, pl[k], pn[k]};
      CHECK(tessera_checkpoint_add_halo_field_staggered_strided(c, k == 0 ? "u" : "v", h1, r[k], TESSERA_F64, 3,
                                                                shape, st[k][0], faces[k]) == TESSERA_OK,
            "add: %s", tessera_last_error());
    }
    CHECK(tessera_checkpoint_commit(c) == TESSERA_OK, "load commit: %s", tessera_last_error());
    for (int k = 0; k < NF; ++k) {
      int wrong = 0;
      for (int64_t l = 0; l < LEAD; ++l)
        for (int64_t i = 0; i < gl[k]; ++i)
          for (int64_t j = 0; j < NLON; ++j) wrong += r[k][at(st[k][0], l, i + 1, j + 2)] != encode(l, i, j);
      CHECK(wrong == 0, "%s pole %d stagger %d: %d values loaded at 1 rank differ from the global field", layout,
            (int)pole, (int)faces[k], wrong);
      free(r[k]);
    }
    tessera_checkpoint_destroy(&c);
    tessera_halo_destroy(&h1);
    tessera_decomp_destroy(&d1);
    tessera_mesh_destroy(&mesh);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int layouts[3][2] = {{size, 1}, {1, size}, {2, 2}};
  const char* names[3] = {"lat bands", "lon bands", "2x2"};
  for (int g = 0; g < 3; ++g) {
    if (g == 2 && size != 4) continue;
    tessera_decomp_t* d = NULL;
    CHECK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, layouts[g][0], layouts[g][1], &d) == TESSERA_OK,
          "decomp: %s", tessera_last_error());
    for (int pole = TESSERA_POLE_ZERO; pole <= TESSERA_POLE_ACROSS_POLE_POINT; ++pole)
    {
      for (int f32 = 0; f32 < 2; ++f32) run(d, (tessera_pole_t)pole, f32, rank, names[g]);
      run_orders(d, (tessera_pole_t)pole, rank, size, 4 * g + pole, names[g]);
    }
    tessera_decomp_destroy(&d);
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_stagger: %s\n", total == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
