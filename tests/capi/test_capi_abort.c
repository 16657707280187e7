/* tessera_abort ends the job with MPI_Abort and never returns (registered WILL_FAIL). */
#include <mpi.h>
#include <stdio.h>

#include <tessera/tessera.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  tessera_abort(TESSERA_ERR_IO);
  printf("tessera_abort returned\n");
  MPI_Finalize();
  return 0; /* reached only if tessera_abort returned: the test then fails */
}
