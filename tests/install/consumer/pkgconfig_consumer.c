/* A C code against the installed tessera, built the Makefile way (mpicc $(pkg-config
 * --cflags --libs tessera)) and by a CMake project with LANGUAGES C (consumer_c/). It
 * makes a decomposition on the automatic grid and prints its global sum of ones. */
#include <mpi.h>
#include <stdio.h>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, glat = 0, glon = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tessera_decomp_t* d = NULL;
  int status = tessera_decomp_auto_grid(size, 6, 8, &glat, &glon);
  if (status == TESSERA_OK) status = tessera_decomp_create(MPI_COMM_WORLD, 6, 8, glat, glon, &d);
  int64_t ls, lc, os, oc;
  if (status == TESSERA_OK) status = tessera_decomp_box(d, &ls, &lc, &os, &oc);
  double ones[48];
  for (int k = 0; k < 48; ++k) ones[k] = 1.0;
  const int64_t shape[2] = {lc, oc};
  double sum = 0;
  if (status == TESSERA_OK) status = tessera_decomp_global_sum(d, ones, TESSERA_F64, TESSERA_ORDER_C, 2, shape, &sum);
  if (status != TESSERA_OK) fprintf(stderr, "pkgconfig_consumer: %s\n", tessera_last_error());
  if (rank == 0 && status == TESSERA_OK) printf("C consumer: %d ranks, sum %g\n", size, sum);
  tessera_decomp_destroy(&d);
  MPI_Finalize();
  return status == TESSERA_OK ? 0 : 1;
}
