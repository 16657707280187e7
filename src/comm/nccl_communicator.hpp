#pragma once
// Private to src/comm: the NCCL communicator a Communicator uses for CUDA tensors. No
// NCCL or CUDA header here (communicator.cpp includes this in every build). The NCCL
// implementation (nccl_communicator_impl.cpp) lives in the CUDA plugin
// (backend/cuda_plugin.hpp), the only library that links NCCL; create() reaches it
// through the plugin's table.
//
// One NcclCommunicator per process group, created on the group's first CUDA collective
// (every rank reaches that call in the same order, which is what makes the creation
// collective safe): rank 0 draws the ncclUniqueId, MPI_Bcast sends it over the group's
// own MPI communicator, and every rank calls ncclCommInitRank on its tensor's device.
//
// Collectives are queued on the device's compute stream (ordered with the kernels that
// produced the data); each returns a waiter that polls a CUDA event and, while the
// event is pending, ncclCommGetAsyncError, so a failed peer aborts the communicator and
// raises NcclError instead of hanging. The waiter sleeps between polls under the
// `sleep` wait policy and spins under `spin`.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "tessera/comm.hpp"
#include "tessera/tensor.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera::detail {

class NcclCommunicator {
 public:
  // Collective over `comm`. `device` is the CUDA ordinal this rank's tensors live on.
  // Throws UnsupportedError when the plugin has no NCCL (or cannot be loaded).
  static std::shared_ptr<NcclCommunicator> create(MPI_Comm comm, int rank, int size, int device);

  virtual ~NcclCommunicator() = default;
  virtual int device() const = 0;

  // Each queues one NCCL collective and returns its waiter (call it to complete).
  // Arguments are validated by the Communicator before they get here.
  virtual std::function<void()> all_reduce(Tensor& tensor, ReduceOp op, const WaitOptions& wait) = 0;
  virtual std::function<void()> all_gather(const Tensor& input, Tensor& output, const WaitOptions& wait) = 0;
  virtual std::function<void()> reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op,
                                               const WaitOptions& wait) = 0;
  virtual std::function<void()> broadcast(Tensor& tensor, int root, const WaitOptions& wait) = 0;
};

// Whether CUDA tensors of this build may use NCCL: a CUDA build, and the environment
// variable TESSERA_NCCL is not "0" (then CUDA tensors are staged through host MPI, the
// escape hatch for a broken NCCL install; set it alike on every rank).
bool nccl_enabled();

// The plugin's implementation behind create() (nccl_communicator_impl.cpp).
std::shared_ptr<NcclCommunicator> create_nccl_communicator(MPI_Comm comm, int rank, int size, int device);

}  // namespace tessera::detail
