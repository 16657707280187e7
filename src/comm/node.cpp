#include "tessera/node.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tessera/agree.hpp"
#include "tessera/check.hpp"

namespace tessera {

int process_usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

int emulated_node_size() {
  const char* env = std::getenv("TESSERA_NODE_SIZE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  if (*end != '\0' || k < 1 || k > 1 << 20) {
    throw ConfigError(std::string("environment variable TESSERA_NODE_SIZE: expected a positive number of ranks "
                                  "per emulated node, got '") +
                      env + "'");
  }
  return static_cast<int>(k);
}

MPI_Comm split_by_node(MPI_Comm comm, int key) {
  int k = 0;
  // Read on every rank and agreed before the splits, so a bad value on one rank cannot
  // leave the others waiting in them.
  agree_on_success(comm, [&] { k = emulated_node_size(); });
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &node));
  if (k == 0) return node;
  // Emulated nodes: the shared-memory node cut by world rank, so that every communicator
  // (a sub-communicator too) sees a process on the same emulated node.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm emulated = MPI_COMM_NULL;
  const int status = MPI_Comm_split(node, world_rank / k, key, &emulated);
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(status);
  return emulated;
}

NodeInfo query_node(MPI_Comm comm) {
  MPI_Comm node = split_by_node(comm, 0);
  NodeInfo info;
  MPI_Comm_rank(node, &info.local_rank);
  MPI_Comm_size(node, &info.local_size);

  // Usable cores of the node's ranks = the union of their affinity masks: with srun
  // binding each rank to its own cores, a per-rank count would undercount; without
  // binding, every rank sees the same mask and the union is that mask.
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < online && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
  }
  const int status = MPI_Allreduce(&mine, &all, static_cast<int>(sizeof mine), MPI_BYTE, MPI_BOR, node);
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(status);
  info.usable_cores = CPU_COUNT(&all) > 0 ? CPU_COUNT(&all) : 1;
  return info;
}

int select_cuda_device(int local_rank, int visible_devices) {
  if (local_rank < 0) {
    throw InvalidArgument("select_cuda_device: negative node-local rank " + std::to_string(local_rank));
  }
  if (visible_devices < 1) {
    throw CudaError("select_cuda_device: no CUDA device is visible to node-local rank " +
                    std::to_string(local_rank) + " (check CUDA_VISIBLE_DEVICES and srun --gpus-per-task)");
  }
  return local_rank % visible_devices;
}

}  // namespace tessera
