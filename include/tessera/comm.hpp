#pragma once
// Communicator: collectives on Tensors over one process group.
//
// Host tensors go through MPI, waiting under the communicator's WaitPolicy. CUDA
// tensors go through NCCL: the group's NCCL communicator is created by prepare_device or
// on its first CUDA collective (the unique id is broadcast over this communicator's MPI
// group), and the wait polls NCCL's asynchronous errors under the same WaitPolicy. With
// TESSERA_NCCL=0 (or in a build without CUDA) CUDA tensors are staged through host
// memory over MPI instead. A group of size 1 short-circuits every collective: no MPI
// or NCCL call is made.
//
// All collectives operate in place or into a caller-provided output, require contiguous
// tensors of the same dtype and device, and must be called by every rank of the group
// in the same order (MPI semantics). Arguments are validated before any communication.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <vector>

#include "tessera/tensor.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera {

namespace detail {
class NcclCommunicator;
class ArrivalBoard;
class FlightRecorder;
struct FlightOp;
}

enum class ReduceOp { sum, avg, max, min };
std::string_view reduce_op_name(ReduceOp op) noexcept;

// A pending non-blocking collective. Move-only. wait() completes it (and finishes any
// post-processing such as the division of `avg` or the copy back of a staged device
// tensor). Destroying a pending request waits for it, so buffers are never released
// under MPI's feet.
class CommRequest {
 public:
  struct State;

  CommRequest();
  explicit CommRequest(std::unique_ptr<State> state);
  CommRequest(CommRequest&&) noexcept;
  CommRequest& operator=(CommRequest&&) noexcept;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;
  ~CommRequest();

  void wait();
  bool test();  // true once complete (post-processing done)
  bool done() const;

 private:
  friend class Communicator;  // attaches the readiness probe of a queued NCCL message
  std::unique_ptr<State> state_;
};

// Counters for what a communicator actually sent: lets tests prove that size-1 groups
// cost nothing, and benchmarks report message counts.
struct CommStats {
  std::int64_t collectives = 0;  // collective calls requested
  std::int64_t mpi_calls = 0;    // MPI communication calls issued
  std::int64_t bytes = 0;        // payload bytes handed to MPI or NCCL
  std::int64_t nccl_calls = 0;   // NCCL collectives and messages issued (CUDA tensors)
};

// Whether the MPI library can send from and receive into CUDA device memory (CUDA-aware
// MPI), for the halo exchange of device fields. The environment variable
// TESSERA_MPI_CUDA_AWARE=1 or 0 overrides; otherwise MPICH's
// MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) or Open MPI's MPIX_Query_cuda_support()
// answers where the MPI headers provide them, and the answer is false (stage through
// pinned host buffers) where they do not. Call after MPI_Init.
bool mpi_cuda_aware();

// Whether MPI can send from and receive into memory of `device` directly: always for the
// host, for a CUDA device when mpi_cuda_aware(). Otherwise a message is staged through
// host memory (the halo exchange does this with pinned buffers).
bool mpi_can_address(Device device);

class Communicator {
 public:
  // Duplicates `comm` (collective over it), so tessera's traffic never matches the
  // caller's messages; the duplicate returns MPI errors instead of aborting.
  explicit Communicator(MPI_Comm comm, WaitOptions wait = {});
  // Takes ownership of an already-private communicator (e.g. the result of a split).
  static Communicator adopt(MPI_Comm owned, WaitOptions resolved_wait);

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm mpi_comm() const { return comm_; }
  WaitPolicy wait_policy() const { return wait_.policy; }  // spin or sleep, resolved
  const WaitOptions& wait_options() const { return wait_; }  // policy and sleep interval, resolved
  const CommStats& stats() const { return stats_; }

  // In place: every rank ends with op over all ranks' `tensor`. avg = sum / size,
  // defined for floating dtypes only.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::sum);
  CommRequest all_reduce_async(Tensor& tensor, ReduceOp op = ReduceOp::sum);

  // `output` holds size() blocks of input.numel() elements, in rank order (a gather
  // along dim 0 when output's dim 0 is size() times input's).
  void all_gather(const Tensor& input, Tensor& output);
  CommRequest all_gather_async(const Tensor& input, Tensor& output);

  // `input` holds size() blocks of output.numel() elements; rank r receives op over
  // all ranks of block r.
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::sum);
  CommRequest reduce_scatter_async(const Tensor& input, Tensor& output,
                                   ReduceOp op = ReduceOp::sum);

  void broadcast(Tensor& tensor, int root);
  CommRequest broadcast_async(Tensor& tensor, int root);

  // A barrier under the wait policy.
  void barrier();

  // Collective: settles up front how this group's tensors on `device` travel, which
  // its first collective on such a tensor would otherwise settle. For a CUDA device
  // (group size > 1, NCCL enabled): the device-sharing check that picks NCCL or host
  // staging, and the group's NCCL communicator when NCCL is picked. For the host it
  // returns at once and asks CUDA nothing (a CPU program never loads the CUDA plugin).
  // Every rank passes its own device of the same kind.
  void prepare_device(Device device);

  // Collective: opens the NCCL channels for CUDA messages between this rank and each of
  // `peers` (ranks of this group, each listed by both sides: a rank that lists a peer
  // which does not list it back, itself, a rank outside the group or a rank twice is an
  // InvalidArgument on every rank). Settles the group's path as prepare_device does;
  // when NCCL is picked, each pair gets two 2-rank NCCL communicators, one per
  // direction, created by exactly the two ranks, in ascending order of the pairs' ranks
  // on every rank (so a chain of pairs never waits in a cycle). Without it, or when the
  // group's CUDA tensors are staged, CUDA messages take MPI. Peers already opened are
  // kept. For the host, or a group of one, it returns at once and communicates nothing.
  void prepare_point_to_point(Device device, const std::vector<int>& peers);

  // Point to point (pipeline stage boundaries): `tensor` sent to rank `dest`, or
  // received from rank `source`, matched by `tag` (>= 0) as MPI matches messages. Only
  // the two ranks take part, so these are not collectives: they do not count toward
  // the watchdog's arrival board (a wait that never ends is still reported, without
  // the list of missing ranks). The receiver must know the shape and dtype. The
  // non-blocking forms let compute run while the message is in flight; their buffers
  // stay alive until wait() (or a test() that returns true).
  //
  // Host tensors go through MPI. CUDA tensors go through NCCL between two ranks whose
  // channels prepare_point_to_point opened; otherwise through MPI, staged through host
  // memory unless MPI is CUDA-aware (the path of a group whose ranks share a GPU, of
  // TESSERA_NCCL=0 and of a build without NCCL). On the NCCL path a message travels on
  // a stream and NCCL communicator of its own per peer and direction, never on the
  // compute stream (a receive queued there would hold back the kernels and sends
  // queued after it), and its send waits for the compute work queued before it; wait()
  // returns once the data has arrived, so compute queued afterwards sees it. NCCL has
  // no tags: the messages one rank sends another on this path match in the order they
  // are posted, so sender and receiver must post them in the same order (the tag is
  // still checked, and used on the MPI path).
  void send(const Tensor& tensor, int dest, int tag = 0);
  void recv(Tensor& tensor, int source, int tag = 0);
  CommRequest isend(const Tensor& tensor, int dest, int tag = 0);
  CommRequest irecv(Tensor& tensor, int source, int tag = 0);

 private:
  struct AdoptTag {};
  Communicator(MPI_Comm owned, WaitOptions resolved_wait, AdoptTag);
  void release() noexcept;

  // Posts one MPI call (blocking when `post` gets a null request), counts it, and wraps
  // completion + `finish` into a CommRequest; waits before returning when `blocking`.
  // A template (defined in communicator.cpp, its only user) so the blocking spin path
  // allocates nothing: no std::function, no request state.
  // `what` says what is posted, for the flight recorder and the watchdog (a point-to-point
  // message is not counted on the watchdog's arrival board).
  template <class Post, class Finish>
  CommRequest launch(const char* name, const detail::FlightOp& what, bool blocking, Post&& post, Finish&& finish,
                     std::initializer_list<Tensor> keep_alive);
  // The one place an operation is noted as posted, on either path: the watchdog's
  // arrival board counts a collective (returns its call number, 0 without a board) and
  // the flight recorder records it (`ticket` for its completion, 0 without a ring).
  std::int64_t note_posted(const detail::FlightOp& what, bool nccl, std::uint64_t& ticket);
  CommRequest all_reduce_impl(Tensor& tensor, ReduceOp op, bool blocking);
  CommRequest all_gather_impl(const Tensor& input, Tensor& output, bool blocking);
  CommRequest reduce_scatter_impl(const Tensor& input, Tensor& output, ReduceOp op, bool blocking);
  CommRequest broadcast_impl(Tensor& tensor, int root, bool blocking);
  CommRequest send_impl(const Tensor& tensor, int dest, int tag, bool blocking);
  CommRequest recv_impl(Tensor& tensor, int source, int tag, bool blocking);
  // The NCCL path for CUDA tensors: whether `t` takes it, the group's NCCL
  // communicator (created on first use), and the blocking/async wrapper of a waiter.
  bool uses_nccl(Device device);
  detail::NcclCommunicator& nccl_for(Device device, const char* op);
  CommRequest nccl_launch(const detail::FlightOp& what, bool blocking, std::function<void()> waiter,
                          std::vector<Tensor> keep_alive);
  // The NCCL channel that carries CUDA messages to (`outgoing`) or from `peer`, or null
  // when CUDA messages with `peer` take MPI (no channel opened, or not a CUDA tensor).
  detail::NcclCommunicator* nccl_channel(Device device, int peer, bool outgoing, const char* op);
  // The blocking/async wrapper of a queued NCCL message (CommRequest::test polls `ready`).
  CommRequest nccl_message(const detail::FlightOp& what, bool blocking, std::function<void()> wait,
                           std::function<bool()> ready, std::vector<Tensor> keep_alive);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  WaitOptions wait_;
  CommStats stats_;
  std::shared_ptr<detail::NcclCommunicator> nccl_;
  // The watchdog's per-rank call counters (comm/watchdog.hpp), kept when a collective
  // timeout is set at construction.
  std::shared_ptr<detail::ArrivalBoard> arrivals_;
  // The flight recorder's ring of this communicator's last operations
  // (tessera/flight_recorder.hpp); null when the recorder was off at construction.
  std::shared_ptr<detail::FlightRecorder> flight_;
  // Whether this group's CUDA tensors may use NCCL: decided by prepare_device or the
  // first CUDA collective (no when two of its ranks share a GPU, which NCCL refuses;
  // see uses_nccl).
  enum class NcclPath { undecided, nccl, staged } nccl_path_ = NcclPath::undecided;
  // The point-to-point channels prepare_point_to_point opened, by peer rank: a 2-rank
  // NCCL communicator per direction, and the peer's rank in them.
  struct NcclPeer {
    std::shared_ptr<detail::NcclCommunicator> outgoing, incoming;
    int nccl_rank = 0;
  };
  std::map<int, NcclPeer> nccl_peers_;
};

// Broadcasts `text` from `root` to every rank of `comm` (two broadcasts: the length, then
// the bytes), through the communicator's wait policy. Collective.
void broadcast_text(Communicator& comm, std::string& text, int root = 0);

}  // namespace tessera
