// mesh_info: prints the process mesh a parallelism config gives on the launched ranks.
//
//   mpiexec -n 8 mesh_info data/configs/mesh_2x2x2.yaml
//
// Rank 0 prints one line per global rank, in rank order:
//   rank G dp D tp T domain M
// Errors (missing argument, bad config, world size not divisible by tensor*domain) are
// printed once, by rank 0, as `mesh_info: error: <message>` on stderr, and every rank
// exits with status 1.

#include <mpi.h>

#include <array>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/parallelism.hpp"

namespace {

constexpr int kFields = 4;  // global rank, dp, tp, domain

int run(int argc, char** argv, int world_rank) {
  if (argc != 2) {
    // Every rank sees the same argv, so every rank fails here together.
    throw tessera::InvalidArgument(
        "expected exactly one argument, the parallelism config "
        "(usage: mpiexec -n N mesh_info CONFIG.yaml)");
  }

  // Each rank reads the file itself. agree_on_success makes a failure on some ranks
  // only (say, a file system hiccup) fail every rank with the same error, before the
  // collective Mesh constructor.
  tessera::ParallelismConfig config;
  tessera::agree_on_success(MPI_COMM_WORLD, [&] {
    config = tessera::ParallelismConfig::from_yaml_file(argv[1]);
  });

  // Collective; throws the same error on every rank (e.g. world not divisible).
  const tessera::Mesh mesh(MPI_COMM_WORLD, config);

  const tessera::MeshCoords& c = mesh.coords();
  const std::array<int, kFields> mine = {mesh.global_rank(), c.dp, c.tp, c.domain};
  std::vector<int> all(world_rank == 0 ? kFields * mesh.world_size() : 0);
  // Gather over the mesh's private duplicate of the world: rank order is the parent's.
  TESSERA_CHECK_MPI(MPI_Gather(mine.data(), kFields, MPI_INT, all.data(), kFields, MPI_INT,
                               0, mesh.world().mpi_comm()));

  if (world_rank == 0) {
    for (int g = 0; g < mesh.world_size(); ++g) {
      const int* f = &all[static_cast<std::size_t>(g) * kFields];
      std::printf("rank %d dp %d tp %d domain %d\n", f[0], f[1], f[2], f[3]);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);

  int status = 0;
  try {
    status = run(argc, argv, world_rank);
  } catch (const std::exception& e) {
    // tessera's collective operations throw the same error on every rank, so rank 0
    // speaks for all of them.
    if (world_rank == 0) {
      std::fprintf(stderr, "mesh_info: error: %s\n", e.what());
      std::fflush(stderr);
    }
    status = 1;
  }

  MPI_Finalize();
  return status;
}
