// Communicator: MPI collectives and point-to-point calls on Tensors under a wait policy.
// Which path a CUDA tensor takes (NCCL, CUDA-aware MPI, host staging): device_path.cpp.

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/compute.hpp"
#include "comm/communicator_checks.hpp"
#include "comm/communicator_launch.hpp"
#include "comm/flight_dump.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/mpi_types.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/watchdog.hpp"
#include "comm/request_state.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"
#include "tessera/node.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

using namespace comm_checks;

constexpr tessera::detail::EnumName<ReduceOp> kReduceOpNames[] = {
    {ReduceOp::sum, "sum"},
    {ReduceOp::avg, "avg"},
    {ReduceOp::max, "max"},
    {ReduceOp::min, "min"},
};

std::string_view reduce_op_name(ReduceOp op) noexcept { return tessera::detail::name_of(kReduceOpNames, op); }

namespace {


void check_reduce_op(const Tensor& t, ReduceOp op, const char* name) {
  if (op == ReduceOp::avg && !is_floating(t.dtype())) {
    throw InvalidArgument(collective_name(name) + ": avg is defined for floating dtypes, not " +
                          t.str());
  }
}

void check_pair(const Tensor& in, const Tensor& out, const char* op) {
  check_buffer(in, op, "input");
  check_buffer(out, op, "output");
  if (in.dtype() != out.dtype() || !(in.device() == out.device())) {
    throw ShapeError(collective_name(op) + ": input " + in.str() + " and output " + out.str() +
                     " must share dtype and device");
  }
}

// Divides a host buffer by `divisor` (the avg of a sum).
void scale_host(Tensor& t, double divisor) {
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f32: {
      auto* p = t.data<float>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] / divisor);
      break;
    }
    case DType::f64: {
      auto* p = t.data<double>();
      for (std::int64_t i = 0; i < n; ++i) p[i] /= divisor;
      break;
    }
    case DType::bf16: {
      auto* p = t.data<bfloat16>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = bfloat16(static_cast<float>(static_cast<float>(p[i]) / divisor));
      break;
    }
    case DType::i64: throw InternalError("scale_host: avg on an integer tensor");
  }
}

// Host memory MPI can read: the tensor itself, or a host copy of a device tensor.
Tensor host_readable(const Tensor& t) { return t.device().is_host() ? t : t.to(Device::host()); }
// Host memory MPI can write: the tensor itself, or an uninitialised host twin.
Tensor host_writable(const Tensor& t) {
  return t.device().is_host() ? t : Tensor::empty(t.shape(), t.dtype(), Device::host());
}


}  // namespace

// ---------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------

Communicator::Communicator(MPI_Comm comm, WaitOptions wait) {
  if (comm == MPI_COMM_NULL) throw InvalidArgument("Communicator: the MPI communicator is MPI_COMM_NULL");
  TESSERA_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  {
    // Named after its parent, for reports such as the collective watchdog's.
    char parent[MPI_MAX_OBJECT_NAME] = {};
    int length = 0;
    TESSERA_CHECK_MPI(MPI_Comm_get_name(comm, parent, &length));
    const std::string name = "tessera duplicate of " + std::string(length > 0 ? parent : "an unnamed communicator");
    TESSERA_CHECK_MPI(MPI_Comm_set_name(comm_, name.c_str()));
  }
  TESSERA_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TESSERA_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  TESSERA_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  wait_ = wait;
  if (wait.policy == WaitPolicy::automatic) {
    // Every rank takes this branch (same argument), so the collective inside is safe.
    const NodeInfo node = query_node(comm_);
    wait_.policy = resolve_wait_policy(wait.policy, node.local_size, node.usable_cores);
  }
  wait_.sleep_interval = resolve_sleep_interval(wait.sleep_interval);
  if (collective_timeout() > 0) arrivals_ = detail::make_arrival_board(comm_);
  flight_ = detail::make_flight_recorder(comm_);
}

Communicator::Communicator(MPI_Comm owned, WaitOptions resolved_wait, AdoptTag)
    : comm_(owned), wait_(resolved_wait) {
  if (wait_.policy == WaitPolicy::automatic) {
    throw InternalError("Communicator::adopt needs a resolved wait policy");
  }
  TESSERA_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TESSERA_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  TESSERA_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  if (collective_timeout() > 0) arrivals_ = detail::make_arrival_board(comm_);
  flight_ = detail::make_flight_recorder(comm_);
}

Communicator Communicator::adopt(MPI_Comm owned, WaitOptions resolved_wait) {
  return Communicator(owned, resolved_wait, AdoptTag{});
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      wait_(other.wait_),
      stats_(other.stats_),
      nccl_(std::move(other.nccl_)),
      arrivals_(std::move(other.arrivals_)),
      flight_(std::move(other.flight_)),
      nccl_path_(other.nccl_path_),
      nccl_peers_(std::move(other.nccl_peers_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    wait_ = other.wait_;
    stats_ = other.stats_;
    nccl_ = std::move(other.nccl_);
    arrivals_ = std::move(other.arrivals_);
    flight_ = std::move(other.flight_);
    nccl_path_ = other.nccl_path_;
    nccl_peers_ = std::move(other.nccl_peers_);
  }
  return *this;
}

Communicator::~Communicator() { release(); }

void Communicator::release() noexcept {
  nccl_.reset();  // before the MPI communicator its id travelled over
  // Both ranks of a pair destroy its two channels in the same order, low -> high first,
  // and the pairs in ascending order (as prepare_point_to_point created them): NCCL's
  // destroy talks to the peer, and opposite orders on the two sides could hang.
  for (auto& [peer, channels] : nccl_peers_) {
    auto& low_to_high = rank_ < peer ? channels.outgoing : channels.incoming;
    auto& high_to_low = rank_ < peer ? channels.incoming : channels.outgoing;
    low_to_high.reset();
    high_to_low.reset();
  }
  nccl_peers_.clear();
  detail::retire_arrival_board(arrivals_);  // its windows live on the communicator
  flight_.reset();  // a dump under way keeps its own reference
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

// ---------------------------------------------------------------------------
// One launch path per collective. `blocking` with the spin policy issues the plain
// blocking MPI call (lowest latency); otherwise the non-blocking call, whose request
// the caller waits on (sleep policy) or returns (async API).
// ---------------------------------------------------------------------------

std::int64_t Communicator::note_posted(const detail::FlightOp& what, bool nccl, std::uint64_t& ticket) {
  ticket = flight_ ? flight_->post(what, nccl) : 0;
  // Only collectives arrive on the board: every rank of the group makes the same
  // collective calls, while point-to-point calls differ from rank to rank.
  return what.collective && arrivals_ ? arrivals_->arrive() : 0;
}

void broadcast_text(Communicator& comm, std::string& text, int root) {
  if (comm.size() == 1) return;
  Tensor length = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(text.size())}, {1});
  comm.broadcast(length, root);
  const auto n = static_cast<std::size_t>(length.to_vector<std::int64_t>()[0]);
  // Whole 64-bit words (plus one), so any length fits a dtype the collectives take.
  Tensor words = Tensor::zeros({static_cast<std::int64_t>((n + 7) / 8 + 1)}, DType::i64);
  if (comm.rank() == root) std::memcpy(words.data(), text.data(), n);
  comm.broadcast(words, root);
  text.assign(static_cast<const char*>(words.data()), n);
}


CommRequest Communicator::all_reduce_impl(Tensor& tensor, ReduceOp op, bool blocking) {
  check_buffer(tensor, "all_reduce", "the");
  check_reduce_op(tensor, op, "all_reduce");
  ++stats_.collectives;
  if (size_ == 1 || tensor.numel() == 0) return {};  // sum/avg/max/min over one rank: identity
  const detail::FlightOp what = flight_op("all_reduce", tensor, static_cast<std::int64_t>(tensor.nbytes()));
  if (uses_nccl(tensor.device())) {
    auto waiter = nccl_for(tensor.device(), "all_reduce").all_reduce(tensor, op, wait_);
    return nccl_launch(what, blocking, std::move(waiter), {tensor});
  }
  Tensor host = host_readable(tensor);
  const MPI_Datatype type = detail::mpi_datatype(tensor.dtype());
  const MPI_Op mpi_op = detail::mpi_reduce_op(op, tensor.dtype());
  const int count = count_of(tensor);
  const MPI_Comm comm = comm_;
  const int size = size_;
  auto post = [=](MPI_Request* r) {
    return r ? MPI_Iallreduce(MPI_IN_PLACE, host.data(), count, type, mpi_op, comm, r)
             : MPI_Allreduce(MPI_IN_PLACE, host.data(), count, type, mpi_op, comm);
  };
  auto finish = [host, tensor, op, size]() mutable {
    if (op == ReduceOp::avg) scale_host(host, size);
    if (!tensor.device().is_host()) tensor.copy_from(host);
  };
  return launch("MPI_Allreduce", what, blocking, post, finish, {host, tensor});
}

CommRequest Communicator::all_gather_impl(const Tensor& input, Tensor& output, bool blocking) {
  check_pair(input, output, "all_gather");
  if (output.numel() != input.numel() * size_) {
    throw ShapeError(collective_name("all_gather") + ": output " + output.str() + " must hold " +
                     std::to_string(size_) + " x " + std::to_string(input.numel()) +
                     " elements of input " + input.str());
  }
  ++stats_.collectives;
  if (size_ == 1 || input.numel() == 0) {
    output.reshape(input.shape()).copy_from(input);
    return {};
  }
  const detail::FlightOp what = flight_op("all_gather", input, static_cast<std::int64_t>(output.nbytes()));
  if (uses_nccl(input.device())) {
    auto waiter = nccl_for(input.device(), "all_gather").all_gather(input, output, wait_);
    return nccl_launch(what, blocking, std::move(waiter), {input, output});
  }
  Tensor in = host_readable(input);
  Tensor out = host_writable(output);
  const MPI_Datatype type = detail::mpi_datatype(input.dtype());
  const int count = count_of(input);
  const MPI_Comm comm = comm_;
  auto post = [=](MPI_Request* r) {
    return r ? MPI_Iallgather(in.data(), count, type, out.data(), count, type, comm, r)
             : MPI_Allgather(in.data(), count, type, out.data(), count, type, comm);
  };
  auto finish = [out, output]() mutable {
    if (!output.device().is_host()) output.copy_from(out);
  };
  return launch("MPI_Allgather", what, blocking, post, finish, {in, out, output});
}

CommRequest Communicator::reduce_scatter_impl(const Tensor& input, Tensor& output, ReduceOp op,
                                              bool blocking) {
  check_pair(input, output, "reduce_scatter");
  check_reduce_op(input, op, "reduce_scatter");
  if (input.numel() != output.numel() * size_) {
    throw ShapeError(collective_name("reduce_scatter") + ": input " + input.str() + " must hold " +
                     std::to_string(size_) + " x " + std::to_string(output.numel()) +
                     " elements of output " + output.str());
  }
  ++stats_.collectives;
  if (size_ == 1 || output.numel() == 0) {
    output.copy_from(input.reshape(output.shape()));
    return {};
  }
  const detail::FlightOp what = flight_op("reduce_scatter", output, static_cast<std::int64_t>(input.nbytes()));
  if (uses_nccl(input.device())) {
    auto waiter = nccl_for(input.device(), "reduce_scatter").reduce_scatter(input, output, op, wait_);
    return nccl_launch(what, blocking, std::move(waiter), {input, output});
  }
  Tensor in = host_readable(input);
  Tensor out = host_writable(output);
  const MPI_Datatype type = detail::mpi_datatype(input.dtype());
  const MPI_Op mpi_op = detail::mpi_reduce_op(op, input.dtype());
  const int count = count_of(output);
  const MPI_Comm comm = comm_;
  const int size = size_;
  auto post = [=](MPI_Request* r) {
    return r ? MPI_Ireduce_scatter_block(in.data(), out.data(), count, type, mpi_op, comm, r)
             : MPI_Reduce_scatter_block(in.data(), out.data(), count, type, mpi_op, comm);
  };
  auto finish = [out, output, op, size]() mutable {
    if (op == ReduceOp::avg) scale_host(out, size);
    if (!output.device().is_host()) output.copy_from(out);
  };
  return launch("MPI_Reduce_scatter_block", what, blocking, post, finish, {in, out, output});
}

CommRequest Communicator::broadcast_impl(Tensor& tensor, int root, bool blocking) {
  check_buffer(tensor, "broadcast", "the");
  if (root < 0 || root >= size_) {
    throw InvalidArgument(collective_name("broadcast") + ": root " + std::to_string(root) +
                          " is not a rank of this " + std::to_string(size_) + "-rank communicator");
  }
  ++stats_.collectives;
  if (size_ == 1 || tensor.numel() == 0) return {};
  const detail::FlightOp what = flight_op("broadcast", tensor, static_cast<std::int64_t>(tensor.nbytes()), root);
  if (uses_nccl(tensor.device())) {
    auto waiter = nccl_for(tensor.device(), "broadcast").broadcast(tensor, root, wait_);
    return nccl_launch(what, blocking, std::move(waiter), {tensor});
  }
  const bool is_root = rank_ == root;
  Tensor host = is_root ? host_readable(tensor) : host_writable(tensor);
  const MPI_Datatype type = detail::mpi_datatype(tensor.dtype());
  const int count = count_of(tensor);
  const MPI_Comm comm = comm_;
  auto post = [=](MPI_Request* r) {
    return r ? MPI_Ibcast(host.data(), count, type, root, comm, r)
             : MPI_Bcast(host.data(), count, type, root, comm);
  };
  auto finish = [host, tensor, is_root]() mutable {
    if (!is_root && !tensor.device().is_host()) tensor.copy_from(host);
  };
  return launch("MPI_Bcast", what, blocking, post, finish, {host, tensor});
}

// ---------------------------------------------------------------------------
// Public blocking / non-blocking pairs
// ---------------------------------------------------------------------------

void Communicator::all_reduce(Tensor& tensor, ReduceOp op) { all_reduce_impl(tensor, op, true); }
CommRequest Communicator::all_reduce_async(Tensor& tensor, ReduceOp op) {
  return all_reduce_impl(tensor, op, false);
}
void Communicator::all_gather(const Tensor& input, Tensor& output) {
  all_gather_impl(input, output, true);
}
CommRequest Communicator::all_gather_async(const Tensor& input, Tensor& output) {
  return all_gather_impl(input, output, false);
}
void Communicator::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  reduce_scatter_impl(input, output, op, true);
}
CommRequest Communicator::reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) {
  return reduce_scatter_impl(input, output, op, false);
}
void Communicator::broadcast(Tensor& tensor, int root) { broadcast_impl(tensor, root, true); }
CommRequest Communicator::broadcast_async(Tensor& tensor, int root) {
  return broadcast_impl(tensor, root, false);
}

void Communicator::barrier() {
  ++stats_.collectives;
  if (size_ == 1) return;
  const MPI_Comm comm = comm_;
  const detail::FlightOp what{"barrier", true, 0, DType::f32, -1, -1, 0};
  launch("MPI_Barrier", what, true,
         [=](MPI_Request* r) { return r ? MPI_Ibarrier(comm, r) : MPI_Barrier(comm); }, [] {}, {});
}

}  // namespace tessera
