/* The sample of docs/c-api.md ("The header documents each one. In short:") as a program:
 * a mesh over every rank, latitude bands of an 18 x 36 grid, a one-cell halo, three
 * exchanges, a restart written to restart/ and read back into a second array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera/tessera.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm = MPI_COMM_WORLD;
  int nranks, rank, step;
  const int64_t nlat = 18, nlon = 36;
  const int nsteps = 3;
  MPI_Comm_size(comm, &nranks);
  MPI_Comm_rank(comm, &rank);

  tessera_mesh_t* mesh;   tessera_decomp_t* decomp;   tessera_halo_t* halo;
  tessera_mesh_create(comm, TESSERA_DATA_NONE, 1, nranks, &mesh);          /* collective */
  tessera_decomp_create_from_mesh(mesh, nlat, nlon, 0, 0, &decomp);        /* latitude bands */
  tessera_halo_create(decomp, 1, 1, 1, 1, /*periodic_lon=*/1, TESSERA_POLE_REPLICATE, &halo);

  int64_t lat0, nlat_loc, lon0, nlon_loc, plat, plon;
  tessera_decomp_box(decomp, &lat0, &nlat_loc, &lon0, &nlon_loc);         /* 0-based */
  tessera_halo_padded(halo, &plat, &plon);                                /* nlat_loc + 2, nlon_loc + 2 */
  double* q = calloc(plat * plon, sizeof *q);                             /* q[plat][plon] */
  const int64_t shape[2] = {plat, plon};
  tessera_halo_add_field(halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL);

  for (step = 0; step < nsteps; ++step) {
    tessera_halo_exchange(halo);                                          /* collective */
    /* stencil on rows 1..nlat_loc, columns 1..nlon_loc */
  }

  tessera_checkpoint_t* ck;                                               /* restart */
  tessera_checkpoint_begin_save(mesh, "restart", step, TESSERA_LAYOUT_SHARED, &ck);
  tessera_checkpoint_add_halo_field(ck, "q", halo, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape);
  tessera_checkpoint_commit(ck);                                          /* collective, atomic */
  tessera_checkpoint_destroy(&ck);

  /* Read the restart back (it follows restart/latest) and compare. */
  int failed = 0;
  double* q2 = calloc(plat * plon, sizeof *q2);
  int64_t saved_step = -1;
  for (int64_t i = 0; i < plat * plon; ++i) q2[i] = -1.0;
  if (tessera_checkpoint_begin_load(mesh, "restart", &ck) != TESSERA_OK ||
      tessera_checkpoint_add_halo_field(ck, "q", halo, q2, TESSERA_F64, TESSERA_ORDER_C, 2, shape) != TESSERA_OK ||
      tessera_checkpoint_commit(ck) != TESSERA_OK || tessera_checkpoint_step(ck, &saved_step) != TESSERA_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, tessera_last_error());
    failed = 1;
  }
  tessera_checkpoint_destroy(&ck);
  for (int64_t i = 1; i <= nlat_loc && !failed; ++i)
    failed = memcmp(&q[i * plon + 1], &q2[i * plon + 1], (size_t)nlon_loc * sizeof *q) != 0;
  if (saved_step != nsteps) failed = 1;
  printf("rank %d: rows %lld..%lld, restart of step %lld %s\n", rank, (long long)lat0,
         (long long)(lat0 + nlat_loc - 1), (long long)saved_step, failed ? "FAILED" : "read back");

  tessera_halo_destroy(&halo);
  tessera_decomp_destroy(&decomp);
  tessera_mesh_destroy(&mesh);
  free(q);
  free(q2);
  MPI_Finalize();
  return failed;
}
