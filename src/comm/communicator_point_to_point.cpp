// Communicator, point to point: send / recv / isend / irecv of Tensors, and the channels
// (NCCL or MPI) prepared for a CUDA tensor's peers. The collectives are in
// communicator.cpp; which path a CUDA tensor takes, in device_path.cpp.

#include <string>
#include <vector>

#include "backend/compute.hpp"
#include "comm/communicator_checks.hpp"
#include "comm/communicator_launch.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/mpi_types.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/request_state.hpp"
#include "comm/watchdog.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"
#include "tessera/node.hpp"

namespace tessera {

using namespace comm_checks;

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

}  // namespace tessera
