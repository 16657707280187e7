/* tessera_decomp_global_sum and tessera_decomp_auto_grid from C: the sum of a field
 * decomposed on the automatic grid, C order and Fortran order, has the same bits as
 * the serial sum of the whole field on every rank count; a NULL array on one rank is
 * the same TESSERA_ERR_INVALID_ARGUMENT on every rank (no rank left in a collective). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "tessera/tessera.h"

enum { NLEV = 3, NLAT = 10, NLON = 12 };

/* A value of very different magnitudes per cell, from its global indices. */
static double value(int k, int64_t i, int64_t j) {
  const double sign = ((k + i + j) % 3 == 0) ? -1.0 : 1.0;
  return sign * ldexp(1.0 + 0.001 * (double)(i * NLON + j), (int)((k * 37 + i * 11 + j * 5) % 90) - 45);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  int glat = 0, glon = 0;
  CHECK(tessera_decomp_auto_grid(size, NLAT, NLON, &glat, &glon) == TESSERA_OK, "auto grid: %s", tessera_last_error());
  CHECK(glat * glon == size, "auto grid %dx%d for %d ranks", glat, glon, size);
  CHECK(tessera_decomp_auto_grid(7, 2, 3, &glat, &glon) == TESSERA_ERR_INVALID_ARGUMENT, "7 ranks on 2x3 accepted");
  CHECK(strstr(tessera_last_error(), "no process grid of 7 ranks") != NULL, "message: %s", tessera_last_error());
  CHECK(tessera_decomp_auto_grid(size, NLAT, NLON, &glat, &glon) == TESSERA_OK, "auto grid again");

  tessera_decomp_t* d = NULL;
  CHECK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, glat, glon, &d) == TESSERA_OK, "create: %s",
        tessera_last_error());
  int64_t ls, lc, os, oc;
  tessera_decomp_box(d, &ls, &lc, &os, &oc);

  /* The serial sum: the whole field on a one-rank decomposition. */
  tessera_decomp_t* one = NULL;
  CHECK(tessera_decomp_create(MPI_COMM_SELF, NLAT, NLON, 1, 1, &one) == TESSERA_OK, "create self");
  double* whole = malloc(sizeof(double) * NLEV * NLAT * NLON);
  for (int k = 0; k < NLEV; ++k)
    for (int64_t i = 0; i < NLAT; ++i)
      for (int64_t j = 0; j < NLON; ++j) whole[(k * NLAT + i) * NLON + j] = value(k, i, j);
  const int64_t whole_shape[3] = {NLEV, NLAT, NLON};
  double serial = 0;
  CHECK(tessera_decomp_global_sum(one, whole, TESSERA_F64, TESSERA_ORDER_C, 3, whole_shape, &serial) == TESSERA_OK,
        "serial sum: %s", tessera_last_error());

  /* C order: c[k][i][j]; Fortran order: f(j, i, k), the same values. */
  double* c = malloc(sizeof(double) * NLEV * lc * oc);
  double* f = malloc(sizeof(double) * NLEV * lc * oc);
  for (int k = 0; k < NLEV; ++k)
    for (int64_t i = 0; i < lc; ++i)
      for (int64_t j = 0; j < oc; ++j) {
        c[(k * lc + i) * oc + j] = value(k, ls + i, os + j);
        f[j + oc * (i + lc * k)] = value(k, ls + i, os + j);
      }
  const int64_t c_shape[3] = {NLEV, lc, oc};
  const int64_t f_shape[3] = {oc, lc, NLEV};
  double sc = 0, sf = 0;
  CHECK(tessera_decomp_global_sum(d, c, TESSERA_F64, TESSERA_ORDER_C, 3, c_shape, &sc) == TESSERA_OK, "C sum: %s",
        tessera_last_error());
  CHECK(tessera_decomp_global_sum(d, f, TESSERA_F64, TESSERA_ORDER_FORTRAN, 3, f_shape, &sf) == TESSERA_OK,
        "Fortran sum: %s", tessera_last_error());
  CHECK(memcmp(&sc, &serial, sizeof sc) == 0, "C-order sum %.17g != serial %.17g", sc, serial);
  CHECK(memcmp(&sf, &serial, sizeof sf) == 0, "Fortran-order sum %.17g != serial %.17g", sf, serial);

  /* A NULL array on the last rank only: every rank gets the error. */
  double s = 0;
  const int status = tessera_decomp_global_sum(d, rank == size - 1 ? NULL : c, TESSERA_F64, TESSERA_ORDER_C, 3,
                                               c_shape, &s);
  CHECK(status == TESSERA_ERR_INVALID_ARGUMENT, "NULL array on one rank: status %d (%s)", status, tessera_last_error());
  CHECK(strstr(tessera_last_error(), "tessera_decomp_global_sum") != NULL, "message: %s", tessera_last_error());

  tessera_decomp_destroy(&one);
  tessera_decomp_destroy(&d);
  free(whole);
  free(c);
  free(f);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_global_sum: %d ranks, %s\n", size, total == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
