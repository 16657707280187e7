// A program that hangs on purpose, for check_watchdog.cmake: with the collective
// watchdog on, the stuck ranks must report and abort the job instead of waiting forever.
//
//   watchdog_hang collective   tp all-reduce of a 2-rank mesh (tensor 2) that rank 1
//                              never joins (it sleeps); timeout from the environment
//   watchdog_hang api          the same world all-reduce with the timeout set by
//                              set_collective_timeout(1) instead of the environment
//   watchdog_hang halo         rank 1 never starts its halo exchange
//   watchdog_hang ok           200 all-reduces every rank joins: completes, exit 0

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/mesh.hpp"
#include "tessera/wait_policy.hpp"

using namespace tessera;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (mode == "api") set_collective_timeout(1.0);
  ParallelismConfig config;
  config.tensor = mode == "collective" ? 2 : 1;
  config.domain = mode == "halo" ? 2 : 1;
  if (mode == "api" || mode == "ok") config.data = DataParallelMode::ddp;  // 2 replicas
  {  // the mesh (its communicators) goes before MPI_Finalize
    Mesh mesh(MPI_COMM_WORLD, config);
    Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2});
    if (mode == "ok") {
      for (int i = 0; i < 200; ++i) mesh.world().all_reduce(x);
      if (rank == 0) std::printf("watchdog_hang ok: 200 all-reduces completed\n");
    } else if (mode == "halo") {
      domain::Decomposition decomposition(mesh.domain(), {1, 8, 8});
      domain::HaloSpec spec;
      spec.width = {1, 1, 0, 0};
      domain::HaloExchange halo(decomposition, spec);
      Tensor field = halo.allocate(DType::f32, {1});
      std::vector<Tensor> fields{field};
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
      halo.exchange(fields);
    } else {
      Communicator& comm = mode == "collective" ? mesh.tp() : mesh.world();
      comm.all_reduce(x);  // call #1: every rank
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
      comm.all_reduce(x);  // call #2: rank 1 never gets here in time
    }
  }
  MPI_Finalize();
  return 0;
}
