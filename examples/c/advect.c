/*
 * advect: a small climate-style model in C on tessera's C API.
 *
 * Two tracers, q (double) and c (float), are advected by a prescribed wind and diffused
 * on a regular lat-lon grid, periodic in longitude, with zero-gradient poles. The grid is
 * split along latitude over the ranks (uneven splits are fine); every step one halo
 * exchange fills the one-cell frame of both fields; restarts are tessera checkpoints.
 * Every cell's update depends only on its global indices and its neighbours, so any
 * number of ranks gives the same bits.
 *
 * usage: mpiexec -n N advect_c [nlat=45] [nlon=72] [steps=100] [restart_every=0]
 *                [restart_dir=DIR] [restart_from=PATH] [layout=shared|per_rank] [out=FILE]
 *
 * out=FILE: rank 0 writes q (nlat*nlon doubles, longitude fastest) then c (floats).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/tessera.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    int status_ = (call);                                                                 \
    if (status_ != TESSERA_OK) {                                                          \
      fprintf(stderr, "advect_c: %s failed (%s): %s\n", #call, tessera_error_string(status_), \
              tessera_last_error());                                                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                       \
    }                                                                                     \
  } while (0)

typedef struct {
  int nlat, nlon, steps, restart_every;
  const char* restart_dir;
  const char* restart_from;
  const char* out;
  tessera_layout_t layout;
} options_t;

static const char* value_of(const char* arg, const char* key) {
  size_t n = strlen(key);
  return strncmp(arg, key, n) == 0 && arg[n] == '=' ? arg + n + 1 : NULL;
}

static int parse(int argc, char** argv, options_t* o) {
  o->nlat = 45;
  o->nlon = 72;
  o->steps = 100;
  o->restart_every = 0;
  o->restart_dir = "restart_c";
  o->restart_from = NULL;
  o->out = NULL;
  o->layout = TESSERA_LAYOUT_SHARED;
  for (int i = 1; i < argc; ++i) {
    const char* v;
    if ((v = value_of(argv[i], "nlat"))) o->nlat = atoi(v);
    else if ((v = value_of(argv[i], "nlon"))) o->nlon = atoi(v);
    else if ((v = value_of(argv[i], "steps"))) o->steps = atoi(v);
    else if ((v = value_of(argv[i], "restart_every"))) o->restart_every = atoi(v);
    else if ((v = value_of(argv[i], "restart_dir"))) o->restart_dir = v;
    else if ((v = value_of(argv[i], "restart_from"))) o->restart_from = v;
    else if ((v = value_of(argv[i], "out"))) o->out = v;
    else if ((v = value_of(argv[i], "layout"))) {
      if (strcmp(v, "per_rank") == 0) o->layout = TESSERA_LAYOUT_PER_RANK;
      else if (strcmp(v, "shared") == 0) o->layout = TESSERA_LAYOUT_SHARED;
      else return 0;
    } else {
      return 0;
    }
  }
  return o->nlat > 0 && o->nlon > 0 && o->steps >= 0 && o->restart_every >= 0;
}

/* Cell centres: row 0 is the northernmost. */
static double lat_deg(int j, int nlat) { return 90.0 - 180.0 * (j + 0.5) / nlat; }
static double lon_deg(int i, int nlon) { return 360.0 * (i + 0.5) / nlon; }

static const double pi = 3.14159265358979323846;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  options_t o;
  if (!parse(argc, argv, &o)) {
    if (world_rank == 0) fprintf(stderr, "advect_c: bad arguments (see the usage in advect.c)\n");
    MPI_Finalize();
    return 2;
  }

  /* The code's own communicator: tessera never assumes MPI_COMM_WORLD. */
  MPI_Comm model_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &model_comm);
  int nranks = 1;
  MPI_Comm_size(model_comm, &nranks);

  tessera_mesh_t* mesh = NULL;
  tessera_decomp_t* decomp = NULL;
  tessera_halo_t* halo = NULL;
  CHECK(tessera_mesh_create(model_comm, TESSERA_DATA_NONE, 1, nranks, &mesh));
  CHECK(tessera_decomp_create_from_mesh(mesh, o.nlat, o.nlon, 0, 0, &decomp));
  CHECK(tessera_halo_create(decomp, 1, 1, 1, 1, /*periodic_lon=*/1, TESSERA_POLE_REPLICATE, &halo));

  int64_t lat0, nlat_loc, lon0, nlon_loc, plat, plon;
  CHECK(tessera_decomp_box(decomp, &lat0, &nlat_loc, &lon0, &nlon_loc));
  CHECK(tessera_halo_padded(halo, &plat, &plon));
  const int64_t shape[2] = {plat, plon};
  double* q = calloc((size_t)(plat * plon), sizeof(double));
  float* c = calloc((size_t)(plat * plon), sizeof(float));
  double* qn = calloc((size_t)(plat * plon), sizeof(double));
  float* cn = calloc((size_t)(plat * plon), sizeof(float));
  if (!q || !c || !qn || !cn) MPI_Abort(MPI_COMM_WORLD, 1);
#define AT(j, i) ((size_t)((j) * plon + (i)))  /* padded (j, i); interior is 1..n */

  CHECK(tessera_halo_add_field(halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL));
  CHECK(tessera_halo_add_field(halo, c, TESSERA_F32, TESSERA_ORDER_C, 2, shape, NULL));

  int step = 0;
  if (o.restart_from) {
    tessera_checkpoint_t* ck = NULL;
    CHECK(tessera_checkpoint_begin_load(mesh, o.restart_from, &ck));
    CHECK(tessera_checkpoint_add_halo_field(ck, "q", halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape));
    CHECK(tessera_checkpoint_add_halo_field(ck, "c", halo, c, TESSERA_F32, TESSERA_ORDER_C, 2, shape));
    CHECK(tessera_checkpoint_commit(ck));
    int64_t s = 0;
    CHECK(tessera_checkpoint_step(ck, &s));
    CHECK(tessera_checkpoint_destroy(&ck));
    step = (int)s;
  } else {
    for (int64_t j = 1; j <= nlat_loc; ++j) {
      for (int64_t i = 1; i <= nlon_loc; ++i) {
        const double phi = lat_deg((int)(lat0 + j - 1), o.nlat), lam = lon_deg((int)(lon0 + i - 1), o.nlon);
        const double dl = (lam - 180.0) / 30.0, dp = (phi - 20.0) / 15.0;
        q[AT(j, i)] = exp(-0.5 * (dl * dl + dp * dp));
        c[AT(j, i)] = (float)(1.0 + 0.5 * cos(lam * pi / 180.0) * cos(phi * pi / 180.0));
      }
    }
  }

  /* Courant numbers (cells per step) and diffusion, from global indices only. */
  const double kq = 0.05;
  const float kc = 0.05f;
  for (; step < o.steps;) {
    CHECK(tessera_halo_exchange(halo));
    for (int64_t j = 1; j <= nlat_loc; ++j) {
      const double phi = lat_deg((int)(lat0 + j - 1), o.nlat) * pi / 180.0;
      for (int64_t i = 1; i <= nlon_loc; ++i) {
        const double lam = lon_deg((int)(lon0 + i - 1), o.nlon) * pi / 180.0;
        const double cu = 0.4 * cos(phi), cv = 0.2 * sin(lam) * cos(phi);
        const double dqx = cu > 0 ? q[AT(j, i)] - q[AT(j, i - 1)] : q[AT(j, i + 1)] - q[AT(j, i)];
        const double dqy = cv > 0 ? q[AT(j, i)] - q[AT(j - 1, i)] : q[AT(j + 1, i)] - q[AT(j, i)];
        qn[AT(j, i)] = q[AT(j, i)] - cu * dqx - cv * dqy +
                       kq * (q[AT(j, i + 1)] + q[AT(j, i - 1)] + q[AT(j + 1, i)] + q[AT(j - 1, i)] - 4.0 * q[AT(j, i)]);
        const float fu = (float)cu, fv = (float)cv;
        const float dcx = fu > 0 ? c[AT(j, i)] - c[AT(j, i - 1)] : c[AT(j, i + 1)] - c[AT(j, i)];
        const float dcy = fv > 0 ? c[AT(j, i)] - c[AT(j - 1, i)] : c[AT(j + 1, i)] - c[AT(j, i)];
        cn[AT(j, i)] = c[AT(j, i)] - fu * dcx - fv * dcy +
                       kc * (c[AT(j, i + 1)] + c[AT(j, i - 1)] + c[AT(j + 1, i)] + c[AT(j - 1, i)] - 4.0f * c[AT(j, i)]);
      }
    }
    for (int64_t j = 1; j <= nlat_loc; ++j) {
      memcpy(&q[AT(j, 1)], &qn[AT(j, 1)], (size_t)nlon_loc * sizeof(double));
      memcpy(&c[AT(j, 1)], &cn[AT(j, 1)], (size_t)nlon_loc * sizeof(float));
    }
    ++step;
    if (o.restart_every > 0 && step % o.restart_every == 0) {
      tessera_checkpoint_t* ck = NULL;
      CHECK(tessera_checkpoint_begin_save(mesh, o.restart_dir, step, o.layout, &ck));
      CHECK(tessera_checkpoint_set_metadata(ck, "advect_c: q (f64) and c (f32) on a lat-lon grid"));
      CHECK(tessera_checkpoint_add_halo_field(ck, "q", halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape));
      CHECK(tessera_checkpoint_add_halo_field(ck, "c", halo, c, TESSERA_F32, TESSERA_ORDER_C, 2, shape));
      CHECK(tessera_checkpoint_commit(ck));
      CHECK(tessera_checkpoint_destroy(&ck));
    }
  }

  /* Diagnostics on the gathered fields (the same summation order at every rank count). */
  double* gq = NULL;
  float* gc = NULL;
  if (world_rank == 0) {
    gq = malloc((size_t)o.nlat * (size_t)o.nlon * sizeof(double));
    gc = malloc((size_t)o.nlat * (size_t)o.nlon * sizeof(float));
    if (!gq || !gc) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CHECK(tessera_halo_gather(halo, q, gq, TESSERA_F64, TESSERA_ORDER_C, 2, shape, 0));
  CHECK(tessera_halo_gather(halo, c, gc, TESSERA_F32, TESSERA_ORDER_C, 2, shape, 0));
  if (world_rank == 0) {
    double mq = 0.0, mc = 0.0;
    for (int64_t k = 0; k < (int64_t)o.nlat * o.nlon; ++k) {
      mq += gq[k];
      mc += gc[k];
    }
    printf("advect_c: %d ranks, %dx%d grid, step %d: sum q = %.17g, sum c = %.9g\n", nranks, o.nlat, o.nlon, step,
           mq, mc);
    if (o.out) {
      FILE* f = fopen(o.out, "wb");
      if (!f || fwrite(gq, sizeof(double), (size_t)o.nlat * o.nlon, f) != (size_t)o.nlat * o.nlon ||
          fwrite(gc, sizeof(float), (size_t)o.nlat * o.nlon, f) != (size_t)o.nlat * o.nlon || fclose(f) != 0) {
        fprintf(stderr, "advect_c: cannot write %s\n", o.out);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    free(gq);
    free(gc);
  }

  CHECK(tessera_halo_destroy(&halo));
  CHECK(tessera_decomp_destroy(&decomp));
  CHECK(tessera_mesh_destroy(&mesh));
  free(q);
  free(c);
  free(qn);
  free(cn);
  MPI_Comm_free(&model_comm);
  MPI_Finalize();
  return 0;
}
