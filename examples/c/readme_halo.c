#include <stdio.h>
#include <stdlib.h>
#include <tessera/tessera.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int nranks, rank;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tessera_mesh_t* mesh;   tessera_decomp_t* decomp;   tessera_halo_t* halo;
  tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks, &mesh);   /* domain = all ranks */
  tessera_decomp_create_from_mesh(mesh, 16, 32, 0, 0, &decomp);                /* 16 x 32, latitude bands */
  tessera_halo_create(decomp, 1, 1, 1, 1, /*periodic_lon=*/1, TESSERA_POLE_REPLICATE, &halo);

  int64_t lat0, nlat, lon0, nlon, plat, plon;
  tessera_decomp_box(decomp, &lat0, &nlat, &lon0, &nlon);                      /* this rank's rows */
  tessera_halo_padded(halo, &plat, &plon);                                     /* nlat + 2, nlon + 2 */
  double* q = calloc(plat * plon, sizeof *q);                                  /* q[plat][plon] */
  for (int64_t i = 1; i <= nlat; ++i)
    for (int64_t j = 1; j <= nlon; ++j) q[i * plon + j] = (double)(lat0 + i - 1);  /* global latitude */
  const int64_t shape[2] = {plat, plon};
  tessera_halo_add_field(halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL);
  const int status = tessera_halo_exchange(halo);                              /* collective */
  printf("rank %d: rows %g..%g, halo rows %g and %g (%s)\n", rank, q[plon + 1], q[nlat * plon + 1], q[1],
         q[(plat - 1) * plon + 1], tessera_error_string(status));
  tessera_halo_destroy(&halo);   tessera_decomp_destroy(&decomp);   tessera_mesh_destroy(&mesh);
  free(q);
  MPI_Finalize();
  return status;
}
