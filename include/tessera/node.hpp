#pragma once
// Facts about the node a rank runs on, learned from the shared-memory split of a
// communicator (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).
//
// split_by_node() is the one place tessera decides which ranks share a node: the node
// facts below, the per-node choice of model ranks and the node-aware redistribution all
// ask it. For tests and measurements on one machine, TESSERA_NODE_SIZE=k emulates nodes
// of k ranks: each shared-memory node is cut into consecutive groups of k world ranks
// (world ranks [0, k), [k, 2k), ... on one machine), so every caller sees the same
// emulated nodes. Emulated nodes share the machine's cores: the automatic wait policy
// counts an emulated node's ranks against them (set TESSERA_WAIT_POLICY=sleep on an
// oversubscribed machine), and their messages still go through shared memory.

#include <mpi.h>

namespace tessera {

struct NodeInfo {
  int local_rank = 0;    // rank among the communicator's ranks on this node
  int local_size = 1;    // how many of the communicator's ranks share this node
  int usable_cores = 1;  // CPUs in the union of those ranks' affinity masks
};

// Collective over `comm`.
NodeInfo query_node(MPI_Comm comm);

// The ranks of `comm` on this rank's node (emulated ones under TESSERA_NODE_SIZE), as a
// new communicator ordered by `key` (ties by rank in `comm`); the caller frees it.
// Collective over `comm`; a bad TESSERA_NODE_SIZE is the same ConfigError on every rank.
MPI_Comm split_by_node(MPI_Comm comm, int key);

// k of TESSERA_NODE_SIZE=k, or 0 when it is unset or empty. ConfigError unless k >= 1.
int emulated_node_size();

// CPUs this process may run on (its affinity mask; respects cgroups and srun binding).
int process_usable_cores() noexcept;

// The CUDA device a rank uses: the node-local rank modulo the visible devices. With
// CUDA_VISIBLE_DEVICES or `srun --gpus-per-task=1` each rank sees only its own GPUs,
// so the runtime's ordinals already respect them. Throws CudaError when
// `visible_devices` < 1, InvalidArgument on a negative local rank.
int select_cuda_device(int local_rank, int visible_devices);

}  // namespace tessera
