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
//
// Point-to-point messages (send/recv) never go on the compute stream: NCCL queues a
// receive as a kernel that holds its stream until the matching send arrives, so a
// receive queued there would hold back every kernel and send queued after it.
// Communicator::prepare_point_to_point gives each (peer, direction) a communicator of
// its own: a 2-rank NcclCommunicator used for messages one way only, whose send/recv
// run on a stream of its own (created on the first message). Why one per direction:
// NCCL's send and receive block the GPU until matched and progress concurrently only
// inside one ncclGroupStart/End, and the operations of one communicator run in the
// order they were queued, so on a communicator shared by both directions a receive
// queued before a send would wait for a peer that may be waiting for that very send.
// On a one-direction channel the sender only sends and the receiver only receives,
// each in its program order, so the n-th send matches the n-th receive and nothing
// else is queued behind either. The send's stream first waits for an event recorded
// on the compute stream (the kernels that produced the data); the receive's stream
// waits the same way before it writes (the caching allocator may hand out a block whose
// last user, queued on the compute stream, has not yet run). The waiter reports
// completion, as for the collectives, so compute queued after it sees the data.

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

  // A queued point-to-point message: `wait` completes it under the wait policy (the
  // collectives' waiter); `ready` asks once, without blocking, whether it completed
  // (CommRequest::test). Both raise NcclError on an asynchronous failure, after
  // aborting the communicator.
  struct Pending {
    std::function<void()> wait;
    std::function<bool()> ready;
  };
  // Queue one ncclSend / ncclRecv of the whole tensor to / from rank `peer` of this
  // communicator, on this communicator's point-to-point stream (see above). NCCL has
  // no tags: messages match in the order they are queued. Arguments are validated by
  // the Communicator; the tensor must stay alive until `wait` returns or `ready` is true.
  virtual Pending send(const Tensor& tensor, int peer, const WaitOptions& wait) = 0;
  virtual Pending recv(Tensor& tensor, int peer, const WaitOptions& wait) = 0;
};

// Whether CUDA tensors of this build may use NCCL: a CUDA build, and the environment
// variable TESSERA_NCCL is not "0" (then CUDA tensors are staged through host MPI, the
// escape hatch for a broken NCCL install; set it alike on every rank).
bool nccl_enabled();

// The plugin's implementation behind create() (nccl_communicator_impl.cpp).
std::shared_ptr<NcclCommunicator> create_nccl_communicator(MPI_Comm comm, int rank, int size, int device);

}  // namespace tessera::detail
