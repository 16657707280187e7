#pragma once
// Facts about the node a rank runs on, learned from the shared-memory split of a
// communicator (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).

#include <mpi.h>

namespace tessera {

struct NodeInfo {
  int local_rank = 0;    // rank among the communicator's ranks on this node
  int local_size = 1;    // how many of the communicator's ranks share this node
  int usable_cores = 1;  // CPUs in the union of those ranks' affinity masks
};

// Collective over `comm`.
NodeInfo query_node(MPI_Comm comm);

// CPUs this process may run on (its affinity mask; respects cgroups and srun binding).
int process_usable_cores() noexcept;

// The CUDA device a rank uses: the node-local rank modulo the visible devices. With
// CUDA_VISIBLE_DEVICES or `srun --gpus-per-task=1` each rank sees only its own GPUs,
// so the runtime's ordinals already respect them. Throws CudaError when
// `visible_devices` < 1, InvalidArgument on a negative local rank.
int select_cuda_device(int local_rank, int visible_devices);

}  // namespace tessera
