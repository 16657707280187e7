/* Pole grids and vector pairs from C: TESSERA_POLE_ACROSS_POLE_POINT mirrors about the
 * pole rows (halo row -k holds row k, half the circle round), and fields flagged with
 * tessera_halo_set_vector_pair come back negated beyond the poles (a scalar field in the
 * same exchange does not); the adjoint of the flagged exchange is its transpose
 * (dot-product identity). At 1, 2 and 4 ranks in latitude bands. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "tessera/tessera.h"

enum { NLAT = 9, NLON = 8 };

static double encode(int64_t i, int64_t j) { return 1.0 + 100.0 * (double)i + (double)j; }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tessera_decomp_t* d = NULL;
  CHECK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, &d) == TESSERA_OK, "decomp: %s", tessera_last_error());
  int64_t ls, lc, os, oc;
  tessera_decomp_box(d, &ls, &lc, &os, &oc);

  const tessera_pole_t poles[2] = {TESSERA_POLE_ACROSS_POLE, TESSERA_POLE_ACROSS_POLE_POINT};
  for (int p = 0; p < 2; ++p) {
    tessera_halo_t* h = NULL;
    CHECK(tessera_halo_create(d, 1, 1, 1, 1, 1, poles[p], &h) == TESSERA_OK, "halo: %s", tessera_last_error());
    int64_t pl = 0, pn = 0;
    tessera_halo_padded(h, &pl, &pn);
    double* u = calloc((size_t)(pl * pn), sizeof(double));
    double* v = calloc((size_t)(pl * pn), sizeof(double));
    double* s = calloc((size_t)(pl * pn), sizeof(double));
    for (int64_t a = 1; a <= lc; ++a)
      for (int64_t b = 1; b <= oc; ++b) u[a * pn + b] = v[a * pn + b] = s[a * pn + b] = encode(ls + a - 1, os + b - 1);
    const int64_t shape[2] = {pl, pn};
    int iu = -1, iv = -1, is = -1;
    tessera_halo_add_field(h, u, TESSERA_F64, TESSERA_ORDER_C, 2, shape, &iu);
    tessera_halo_add_field(h, v, TESSERA_F64, TESSERA_ORDER_C, 2, shape, &iv);
    tessera_halo_add_field(h, s, TESSERA_F64, TESSERA_ORDER_C, 2, shape, &is);
    CHECK(tessera_halo_set_vector_pair(h, iu, iv) == TESSERA_OK, "vector pair: %s", tessera_last_error());
    CHECK(tessera_halo_set_vector_pair(h, iu, 7) == TESSERA_ERR_INVALID_ARGUMENT, "index 7 accepted");
    CHECK(tessera_halo_set_vector_pair(h, iu, iu) == TESSERA_ERR_INVALID_ARGUMENT, "u == v accepted");
    CHECK(tessera_halo_exchange(h) == TESSERA_OK, "exchange: %s", tessera_last_error());
    for (int64_t a = 0; a < pl; ++a)
      for (int64_t b = 0; b < pn; ++b) {
        const int64_t i = ls - 1 + a, j = ((os - 1 + b) % NLON + NLON) % NLON;
        const int beyond = i < 0 || i >= NLAT;
        int64_t si = i, sj = j;
        if (beyond) {
          if (poles[p] == TESSERA_POLE_ACROSS_POLE) {
            si = i < 0 ? -(i + 1) : (NLAT - 1) - (i - NLAT);
          } else {
            si = i < 0 ? -i : (NLAT - 1) - (i - (NLAT - 1));
          }
          sj = (j + NLON / 2) % NLON;
        }
        const double want = encode(si, sj);
        CHECK(s[a * pn + b] == want, "pole %d scalar (%lld, %lld): %g != %g", p, (long long)i, (long long)j,
              s[a * pn + b], want);
        CHECK(u[a * pn + b] == (beyond ? -want : want), "pole %d u (%lld, %lld): %g", p, (long long)i, (long long)j,
              u[a * pn + b]);
        CHECK(v[a * pn + b] == (beyond ? -want : want), "pole %d v (%lld, %lld): %g", p, (long long)i, (long long)j,
              v[a * pn + b]);
      }
    /* Transpose: <A x, y> = <x, A^T y> over u and v (s zero). */
    double* x = malloc(sizeof(double) * (size_t)(2 * pl * pn));
    double* y = malloc(sizeof(double) * (size_t)(2 * pl * pn));
    unsigned seed = 17u + (unsigned)rank;
    for (int64_t k = 0; k < 2 * pl * pn; ++k) {
      seed = seed * 1103515245u + 12345u;
      x[k] = (double)(seed >> 8) / 16777216.0 - 0.5;
      seed = seed * 1103515245u + 12345u;
      y[k] = (double)(seed >> 8) / 16777216.0 - 0.5;
    }
    memcpy(u, x, sizeof(double) * (size_t)(pl * pn));
    memcpy(v, x + pl * pn, sizeof(double) * (size_t)(pl * pn));
    memset(s, 0, sizeof(double) * (size_t)(pl * pn));
    tessera_halo_exchange(h);
    double sums[2] = {0, 0};
    for (int64_t k = 0; k < pl * pn; ++k) sums[0] += u[k] * y[k] + v[k] * y[pl * pn + k];
    memcpy(u, y, sizeof(double) * (size_t)(pl * pn));
    memcpy(v, y + pl * pn, sizeof(double) * (size_t)(pl * pn));
    CHECK(tessera_halo_exchange_adjoint(h) == TESSERA_OK, "adjoint: %s", tessera_last_error());
    for (int64_t k = 0; k < pl * pn; ++k) sums[1] += x[k] * u[k] + x[pl * pn + k] * v[k];
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(fabs(sums[0] - sums[1]) <= 1e-12 * fmax(1.0, fabs(sums[0])), "pole %d: <Ax,y> %.17g != <x,A^T y> %.17g", p,
          sums[0], sums[1]);
    free(x);
    free(y);
    free(u);
    free(v);
    free(s);
    tessera_halo_destroy(&h);
  }
  tessera_decomp_destroy(&d);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_vector_pair: %s\n", total == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
