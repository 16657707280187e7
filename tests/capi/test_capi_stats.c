/*
 * Normalisation statistics from the code's own fields (tessera_stats_*, issue 41), at 1,
 * 2 and 4 ranks on a code's Cartesian decomposition (dims {lon, lat}, remainder on the
 * last rank): the per-channel mean and std over 4 steps of 2 samples equal, bit for bit,
 * the serial twin's (the whole grid on MPI_COMM_SELF) and the same steps added as one
 * batch of 8; they agree with a two-pass long double reference within 1e-13; the
 * constant channel gets the documented floor and is flagged; a wrong shape on one rank
 * fails every rank.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

enum { NLAT = 9, NLON = 10, C = 3, STEPS = 4, SAMPLES = 2 };

static double value(int step, int sample, int c, int64_t i, int64_t j) {
  if (c == 2) return 5.0; /* a constant channel (a mask, a fixed forcing) */
  const double base = c == 0 ? 280.0 : -3.0;
  return base + (c + 1) * sin(0.3 * i + 0.17 * j + step) * cos(0.5 * sample - 0.2 * j);
}

/* Fills (samples, C, lat_count, lon_count) of steps [step0, step0 + steps). */
static double* block(int step0, int steps, int64_t lat0, int64_t nlat, int64_t lon0, int64_t nlon) {
  double* x = malloc(sizeof(double) * steps * SAMPLES * C * nlat * nlon);
  size_t k = 0;
  for (int s = 0; s < steps; ++s)
    for (int b = 0; b < SAMPLES; ++b)
      for (int c = 0; c < C; ++c)
        for (int64_t i = 0; i < nlat; ++i)
          for (int64_t j = 0; j < nlon; ++j) x[k++] = value(step0 + s, b, c, lat0 + i, lon0 + j);
  return x;
}

typedef struct {
  double mean[C], std[C];
  int floored[C];
  int64_t count;
} moments_t;

/* The statistics of every step through `d`, one step per add (or all at once). */
static moments_t statistics(const tessera_decomp_t* d, int one_batch) {
  int64_t lat0, nlat, lon0, nlon;
  CHECK(tessera_decomp_box(d, &lat0, &nlat, &lon0, &nlon) == TESSERA_OK, "box");
  tessera_stats_t* st = NULL;
  CHECK(tessera_stats_create(d, C, &st) == TESSERA_OK, "create");
  for (int s = 0; s < STEPS; s += one_batch ? STEPS : 1) {
    const int steps = one_batch ? STEPS : 1;
    double* x = block(s, steps, lat0, nlat, lon0, nlon);
    const int64_t shape[4] = {steps * SAMPLES, C, nlat, nlon};
    CHECK(tessera_stats_add(st, x, TESSERA_F64, TESSERA_ORDER_C, 4, shape) == TESSERA_OK, "add");
    free(x);
  }
  moments_t m;
  CHECK(tessera_stats_finish(st, 1e-6, m.mean, m.std, m.floored, &m.count) == TESSERA_OK, "finish");
  tessera_stats_destroy(&st);
  return m;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int dims[2] = {0, 0}, periods[2] = {1, 0};
  MPI_Dims_create(size, 2, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &rank);

  tessera_decomp_t *d = NULL, *serial = NULL;
  CHECK(tessera_decomp_create_cart(cart, NLAT, NLON, TESSERA_CART_LON_LAT, TESSERA_SPLIT_LAST_RANK, &d) == TESSERA_OK,
        "create_cart");
  CHECK(tessera_decomp_create(MPI_COMM_SELF, NLAT, NLON, 1, 1, &serial) == TESSERA_OK, "serial decomposition");
  const moments_t par = statistics(d, 0), batch = statistics(d, 1), twin = statistics(serial, 0);
  CHECK(memcmp(par.mean, twin.mean, sizeof par.mean) == 0 && memcmp(par.std, twin.std, sizeof par.std) == 0,
        "parallel and serial statistics differ in their bits: mean[0] %.17g vs %.17g", par.mean[0], twin.mean[0]);
  CHECK(memcmp(par.mean, batch.mean, sizeof par.mean) == 0 && memcmp(par.std, batch.std, sizeof par.std) == 0,
        "one step at a time and one batch differ");
  CHECK(par.count == (int64_t)STEPS * SAMPLES * NLAT * NLON, "count %lld", (long long)par.count);

  /* Two-pass reference in long double. */
  for (int c = 0; c < C; ++c) {
    long double sum = 0, squares = 0;
    for (int s = 0; s < STEPS; ++s)
      for (int b = 0; b < SAMPLES; ++b)
        for (int64_t i = 0; i < NLAT; ++i)
          for (int64_t j = 0; j < NLON; ++j) sum += value(s, b, c, i, j);
    const long double n = (long double)par.count, mean = sum / n;
    for (int s = 0; s < STEPS; ++s)
      for (int b = 0; b < SAMPLES; ++b)
        for (int64_t i = 0; i < NLAT; ++i)
          for (int64_t j = 0; j < NLON; ++j) squares += (value(s, b, c, i, j) - mean) * (value(s, b, c, i, j) - mean);
    const double std = (double)sqrtl(squares / n);
    CHECK(fabs(par.mean[c] - (double)mean) <= 1e-13 * fabs((double)mean), "mean[%d] %.17g vs %.17g", c, par.mean[c],
          (double)mean);
    if (c == 2) {
      CHECK(par.floored[c] == 1 && par.std[c] == 1e-6 * 5.0, "constant channel: std %.17g floored %d", par.std[c],
            par.floored[c]);
    } else {
      CHECK(par.floored[c] == 0 && fabs(par.std[c] - std) <= 1e-12 * std, "std[%d] %.17g vs %.17g", c, par.std[c], std);
    }
  }

  /* A wrong shape on the last rank: an error on every rank. */
  tessera_stats_t* st = NULL;
  CHECK(tessera_stats_create(d, C, &st) == TESSERA_OK, "create");
  int64_t lat0, nlat, lon0, nlon;
  tessera_decomp_box(d, &lat0, &nlat, &lon0, &nlon);
  double* x = block(0, 1, lat0, nlat, lon0, nlon);
  const int64_t shape[4] = {SAMPLES, C, nlat - (rank == size - 1 ? 1 : 0), nlon};
  CHECK(tessera_stats_add(st, x, TESSERA_F64, TESSERA_ORDER_C, 4, shape) == TESSERA_ERR_SHAPE, "wrong shape");
  double mean[C], std[C];
  CHECK(tessera_stats_finish(st, 1e-6, mean, std, NULL, NULL) == TESSERA_ERR_INVALID_ARGUMENT, "finish before add");
  free(x);
  tessera_stats_destroy(&st);

  tessera_decomp_destroy(&d);
  tessera_decomp_destroy(&serial);
  MPI_Comm_free(&cart);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
