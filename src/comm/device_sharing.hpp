#pragma once
// Private to src/comm: ranks of one process group that share a GPU. NCCL refuses a
// communicator with two ranks on one device ("Duplicate GPU detected"), which is what a
// single-GPU machine running 2 or 4 ranks, or a node with more ranks than GPUs, gives.
// The Communicator detects it when the group's first CUDA collective would create the
// NCCL communicator (every rank's device UUID, gathered over the group) and then sends
// that group's CUDA tensors through MPI with host staging instead.

#include <string>
#include <vector>

namespace tessera::detail {

// The first pair of group ranks (first < second, by rank order) whose device UUIDs are
// equal; first < 0 when every rank has its own device.
struct SharedDevice {
  int first = -1, second = -1;
  bool found() const { return first >= 0; }
};
SharedDevice first_shared_device(const std::vector<std::string>& uuids);

// The UUID of CUDA device `device` as 32 hex digits (throws CudaError when the runtime
// cannot say; UnsupportedError in a build without CUDA or when the CUDA plugin
// cannot be loaded).
std::string cuda_device_uuid(int device);

}  // namespace tessera::detail
