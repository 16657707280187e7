// Downstream consumer of an installed tessera: builds a tensor-parallel Mesh of size 2
// on MPI_COMM_WORLD and all-reduces one value over the tp communicator. Rank 0 prints
// what it saw; any mismatch on any rank makes every rank exit 1.

#include <mpi.h>

#include <array>
#include <cstdio>
#include <exception>
#include <vector>

#include <tessera/tessera.hpp>

namespace {

int run(int world_rank, int world_size) {
  const auto config = tessera::ParallelismConfig::from_yaml_string("parallelism: {tensor: 2}");
  const tessera::Mesh mesh(MPI_COMM_WORLD, config);

  // Every rank contributes rank+1; the sum over the tp group of two is 1 + 2 = 3.
  tessera::Tensor value = tessera::Tensor::from_vector<double>({world_rank + 1.0}, {1});
  mesh.tp().all_reduce(value, tessera::ReduceOp::sum);
  const double sum = value.to_vector<double>().at(0);

  const tessera::MeshCoords& c = mesh.coords();
  const std::array<int, 5> mine = {mesh.global_rank(), c.dp, c.tp, c.domain,
                                   sum == 3.0 ? 1 : 0};
  std::vector<int> all(world_rank == 0 ? 5 * world_size : 0);
  MPI_Gather(mine.data(), 5, MPI_INT, all.data(), 5, MPI_INT, 0, MPI_COMM_WORLD);

  int ok = (world_size == 2 && mesh.tp_size() == 2 && mesh.dp_size() == 1 &&
            mesh.domain_size() == 1)
               ? 1
               : 0;
  if (world_rank == 0) {
    std::printf("tessera %s: %d ranks, mesh %s\n", tessera::version_string, world_size,
                config.str().c_str());
    for (int g = 0; g < world_size; ++g) {
      const int* f = &all[static_cast<std::size_t>(g) * 5];
      std::printf("rank %d dp %d tp %d domain %d\n", f[0], f[1], f[2], f[3]);
      if (f[0] != g || f[1] != 0 || f[2] != g || f[3] != 0 || f[4] != 1) ok = 0;
    }
    std::printf("tp all_reduce sum: %g\n", sum);
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (world_rank == 0) {
    std::printf("consumer: %s\n", ok ? "OK" : "MISMATCH");
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  int world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int status = 1;
  try {
    status = run(world_rank, world_size);
  } catch (const std::exception& e) {
    // tessera throws the same error on every rank, so every rank gets here.
    if (world_rank == 0) std::fprintf(stderr, "consumer: error: %s\n", e.what());
  }
  MPI_Finalize();
  return status;
}
