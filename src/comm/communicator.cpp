// Communicator: MPI collectives and point-to-point calls on Tensors under a wait policy.
// Which path a CUDA tensor takes (NCCL, CUDA-aware MPI, host staging): device_path.cpp.

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/compute.hpp"
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

constexpr tessera::detail::EnumName<ReduceOp> kReduceOpNames[] = {
    {ReduceOp::sum, "sum"},
    {ReduceOp::avg, "avg"},
    {ReduceOp::max, "max"},
    {ReduceOp::min, "min"},
};

std::string_view reduce_op_name(ReduceOp op) noexcept { return tessera::detail::name_of(kReduceOpNames, op); }

namespace {

std::string collective_name(const char* op) { return std::string("Communicator::") + op; }

void check_buffer(const Tensor& t, const char* op, const char* role) {
  if (!t.defined()) throw InvalidArgument(collective_name(op) + ": " + role + " tensor is undefined");
  if (!t.is_contiguous()) {
    throw ShapeError(collective_name(op) + ": " + role + " tensor " + t.str() +
                     " is not contiguous; pass contiguous() of it");
  }
  if (t.numel() > INT_MAX) {
    throw UnsupportedError(collective_name(op) + ": " + role + " tensor " + t.str() + " has " +
                           std::to_string(t.numel()) + " elements; MPI counts are limited to " +
                           std::to_string(INT_MAX));
  }
}

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

int count_of(const Tensor& t) { return static_cast<int>(t.numel()); }

// What the flight recorder notes of an operation on `t` (count: elements per rank).
detail::FlightOp flight_op(const char* op, const Tensor& t, std::int64_t bytes, int peer = -1, int tag = -1,
                           bool collective = true) {
  return detail::FlightOp{op, collective, t.numel(), t.dtype(), peer, tag, bytes};
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

template <class Post, class Finish>
CommRequest Communicator::launch(const char* name, const detail::FlightOp& what, bool blocking, Post&& post,
                                 Finish&& finish, std::initializer_list<Tensor> keep_alive) {
  ++stats_.mpi_calls;
  stats_.bytes += what.bytes;
  std::uint64_t ticket = 0;
  const std::int64_t call = note_posted(what, false, ticket);
  const detail::WaitSite site = call > 0 ? detail::WaitSite{name, comm_, arrivals_, call} : detail::WaitSite{name, comm_};
  if (blocking && wait_.policy == WaitPolicy::spin && !arrivals_) {
    // The latency path: the plain blocking call, no request state to allocate.
    const int status = post(nullptr);
    if (status != MPI_SUCCESS) detail::throw_mpi_error(status, name, __FILE__, __LINE__);
    if (flight_) flight_->complete(ticket);
    finish();
    return {};
  }
  auto state = std::make_unique<CommRequest::State>();
  state->wait = wait_;
  state->finish = std::forward<Finish>(finish);
  state->keep_alive = keep_alive;
  state->site = site;
  if (ticket != 0) state->flight = {flight_, ticket};
  const int status = post(&state->request);
  if (status != MPI_SUCCESS) {
    state->complete = true;  // nothing pending: do not wait in the destructor
    detail::throw_mpi_error(status, name, __FILE__, __LINE__);
  }
  CommRequest req(std::move(state));
  if (blocking) req.wait();
  return req;
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
// Point to point
// ---------------------------------------------------------------------------

namespace {

void check_peer(int peer, int tag, int size, const char* op, const char* role) {
  if (peer < 0 || peer >= size) {
    throw InvalidArgument(collective_name(op) + ": " + role + " " + std::to_string(peer) + " is not a rank of this " +
                          std::to_string(size) + "-rank communicator");
  }
  if (tag < 0) throw InvalidArgument(collective_name(op) + ": tag " + std::to_string(tag) + " is negative");
}

// MPI knows nothing of a device's compute stream. When it reads (send) or writes (recv) a
// CUDA tensor directly (CUDA-aware MPI), the kernels that produce the tensor, or last
// read or cleared its memory, must be done first, as the halo exchange does before its
// direct messages. A host tensor has nothing to wait for; a staged one is copied on the
// stream, which waits by itself.
void wait_for_device_stream(const Tensor& tensor) {
  if (!tensor.device().is_host() && mpi_can_address(tensor.device())) {
    detail::compute_for(tensor.device()).synchronize_stream(tensor.device().index);
  }
}

}  // namespace

void Communicator::prepare_point_to_point(Device device, const std::vector<int>& peers) {
  // Like prepare_device: the host and a group of one settle nothing, and ask CUDA nothing.
  if (!device.is_cuda() || size_ == 1) return;
  if (device.index == Device::kAutoIndex) {
    throw InvalidArgument(collective_name("prepare_point_to_point") +
                          ": cuda:auto names no device; pass the resolved one (Mesh::device())");
  }
  // Which ranks list which: a rank that opens a channel its peer does not would wait in
  // the creation forever, so the lists are checked pairwise, and agreed, first.
  std::string problem;
  std::vector<int> lists(static_cast<std::size_t>(size_), 0), listed_by(lists.size(), 0);
  for (int peer : peers) {
    if (peer < 0 || peer >= size_ || peer == rank_ || lists[static_cast<std::size_t>(peer)] != 0) {
      problem = "peer " + std::to_string(peer) + " of rank " + std::to_string(rank_) +
                (peer == rank_ ? " is the rank itself"
                 : peer < 0 || peer >= size_ ? " is not a rank of this " + std::to_string(size_) + "-rank communicator"
                                             : " is listed twice");
      break;
    }
    lists[static_cast<std::size_t>(peer)] = 1;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Ialltoall(lists.data(), 1, MPI_INT, listed_by.data(), 1, MPI_INT, comm_, &request));
  detail::wait_request(request, wait_, {"prepare_point_to_point (MPI_Ialltoall of the peer lists)", comm_});
  for (int q = 0; q < size_ && problem.empty(); ++q) {
    const auto k = static_cast<std::size_t>(q);
    if (lists[k] != listed_by[k]) {
      problem = "rank " + std::to_string(rank_) + (lists[k] != 0 ? " lists" : " does not list") + " peer " +
                std::to_string(q) + " but rank " + std::to_string(q) + (listed_by[k] != 0 ? " lists" : " does not list") +
                " rank " + std::to_string(rank_);
    }
  }
  agree_on_success(comm_, [&] {
    if (!problem.empty()) throw InvalidArgument(collective_name("prepare_point_to_point") + ": " + problem);
  });
  if (!uses_nccl(device)) return;  // staged (shared GPU) or NCCL off: CUDA messages take MPI
  // Pairs in ascending order of (lower rank, higher rank): for this rank that is its
  // peers in ascending order. Each creation waits for exactly the two ranks; the
  // smallest pair still open anywhere has both ranks past every smaller pair, so it
  // completes, and so on: no cycle of waits, whatever the graph of pairs.
  for (int q = 0; q < size_; ++q) {
    if (lists[static_cast<std::size_t>(q)] == 0) continue;
    if (const auto it = nccl_peers_.find(q); it != nccl_peers_.end()) {
      // Opened by an earlier call, on both ranks alike: keep it.
      (void)nccl_channel(device, q, true, "prepare_point_to_point");
      continue;
    }
    const int low = std::min(rank_, q), high = std::max(rank_, q);
    MPI_Group group = MPI_GROUP_NULL, pair_group = MPI_GROUP_NULL;
    TESSERA_CHECK_MPI(MPI_Comm_group(comm_, &group));
    const int members[2] = {low, high};
    const int included = MPI_Group_incl(group, 2, members, &pair_group);
    MPI_Group_free(&group);
    if (included != MPI_SUCCESS) detail::throw_mpi_error(included, "MPI_Group_incl", __FILE__, __LINE__);
    // Collective over the pair only. The tag tells apart the creations of overlapping
    // pairs (32767 is the least MPI_TAG_UB the standard allows).
    MPI_Comm pair = MPI_COMM_NULL;
    const int created = MPI_Comm_create_group(comm_, pair_group, (low * size_ + high) % 32767, &pair);
    MPI_Group_free(&pair_group);
    if (created != MPI_SUCCESS) detail::throw_mpi_error(created, "MPI_Comm_create_group", __FILE__, __LINE__);
    NcclPeer channels;
    const int pair_rank = rank_ == low ? 0 : 1;
    channels.nccl_rank = 1 - pair_rank;
    try {
      // Both ranks create low -> high first, then high -> low (the ids travel over `pair`).
      auto low_to_high = detail::NcclCommunicator::create(pair, pair_rank, 2, device.index);
      auto high_to_low = detail::NcclCommunicator::create(pair, pair_rank, 2, device.index);
      channels.outgoing = rank_ == low ? low_to_high : high_to_low;
      channels.incoming = rank_ == low ? high_to_low : low_to_high;
      // NCCL connects a point-to-point peer lazily, inside the first ncclSend / ncclRecv
      // on a communicator, and that call returns only once the peer makes its own first
      // call on the same communicator. Connect both directions now, one after the other
      // with both ranks in the matching call, so that a rank whose first message is a
      // receive posted before its own first send cannot block in NCCL.
      Tensor token = Tensor::zeros({1}, DType::f32, device);
      const int peer = channels.nccl_rank;
      auto first = rank_ == low ? channels.outgoing->send(token, peer, wait_) : channels.incoming->recv(token, peer, wait_);
      first.wait();
      auto second = rank_ == low ? channels.incoming->recv(token, peer, wait_) : channels.outgoing->send(token, peer, wait_);
      second.wait();
    } catch (...) {
      MPI_Comm_free(&pair);
      throw;
    }
    MPI_Comm_free(&pair);
    nccl_peers_.emplace(q, std::move(channels));
  }
}

detail::NcclCommunicator* Communicator::nccl_channel(Device device, int peer, bool outgoing, const char* op) {
  if (!device.is_cuda()) return nullptr;
  const auto it = nccl_peers_.find(peer);
  // A channel exists only where prepare_point_to_point settled the NCCL path, so
  // uses_nccl answers from that settlement here and communicates nothing.
  if (it == nccl_peers_.end() || !uses_nccl(device)) return nullptr;
  detail::NcclCommunicator& channel = outgoing ? *it->second.outgoing : *it->second.incoming;
  if (channel.device() != device.index) {
    throw InvalidArgument(collective_name(op) + ": " + device.str() + " is not cuda:" +
                          std::to_string(channel.device()) + ", the device the channel with rank " +
                          std::to_string(peer) + " was opened for");
  }
  return &channel;
}

CommRequest Communicator::nccl_message(const detail::FlightOp& what, bool blocking, std::function<void()> wait,
                                       std::function<bool()> ready, std::vector<Tensor> keep_alive) {
  CommRequest request = nccl_launch(what, blocking, std::move(wait), std::move(keep_alive));
  if (!request.done()) request.state_->ready = std::move(ready);
  return request;
}

CommRequest Communicator::send_impl(const Tensor& tensor, int dest, int tag, bool blocking) {
  check_buffer(tensor, "send", "the");
  check_peer(dest, tag, size_, "send", "destination");
  if (tensor.numel() == 0) return {};
  const detail::FlightOp what = flight_op("send", tensor, static_cast<std::int64_t>(tensor.nbytes()), dest, tag, false);
  if (detail::NcclCommunicator* channel = nccl_channel(tensor.device(), dest, true, "send")) {
    auto pending = channel->send(tensor, nccl_peers_.at(dest).nccl_rank, wait_);
    return nccl_message(what, blocking, std::move(pending.wait),
                        std::move(pending.ready), {tensor});
  }
  // A device tensor MPI cannot address is copied to the host first (the copy is the
  // message's buffer, kept alive until completion).
  const Tensor host = mpi_can_address(tensor.device()) ? tensor : tensor.to(Device::host());
  wait_for_device_stream(tensor);
  const MPI_Datatype type = detail::mpi_datatype(tensor.dtype());
  const int count = count_of(tensor);
  const MPI_Comm comm = comm_;
  auto post = [=](MPI_Request* r) {
    void* data = host.data();
    return r ? MPI_Isend(data, count, type, dest, tag, comm, r) : MPI_Send(data, count, type, dest, tag, comm);
  };
  return launch("MPI_Send", what, blocking, post, [] {}, {host, tensor});
}

CommRequest Communicator::recv_impl(Tensor& tensor, int source, int tag, bool blocking) {
  check_buffer(tensor, "recv", "the");
  check_peer(source, tag, size_, "recv", "source");
  if (tensor.numel() == 0) return {};
  const detail::FlightOp what = flight_op("recv", tensor, static_cast<std::int64_t>(tensor.nbytes()), source, tag, false);
  if (detail::NcclCommunicator* channel = nccl_channel(tensor.device(), source, false, "recv")) {
    auto pending = channel->recv(tensor, nccl_peers_.at(source).nccl_rank, wait_);
    return nccl_message(what, blocking, std::move(pending.wait),
                        std::move(pending.ready), {tensor});
  }
  const bool direct = mpi_can_address(tensor.device());
  if (direct) wait_for_device_stream(tensor);
  Tensor host = direct ? tensor : Tensor::empty(tensor.shape(), tensor.dtype(), Device::host());
  const MPI_Datatype type = detail::mpi_datatype(tensor.dtype());
  const int count = count_of(tensor);
  const MPI_Comm comm = comm_;
  auto post = [=](MPI_Request* r) mutable {
    return r ? MPI_Irecv(host.data(), count, type, source, tag, comm, r)
             : MPI_Recv(host.data(), count, type, source, tag, comm, MPI_STATUS_IGNORE);
  };
  auto finish = [host, tensor, direct]() mutable {
    if (!direct) tensor.copy_from(host);
  };
  return launch("MPI_Recv", what, blocking, post, finish, {host, tensor});
}

void Communicator::send(const Tensor& tensor, int dest, int tag) { send_impl(tensor, dest, tag, true); }
void Communicator::recv(Tensor& tensor, int source, int tag) { recv_impl(tensor, source, tag, true); }
CommRequest Communicator::isend(const Tensor& tensor, int dest, int tag) {
  return send_impl(tensor, dest, tag, false);
}
CommRequest Communicator::irecv(Tensor& tensor, int source, int tag) {
  return recv_impl(tensor, source, tag, false);
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
