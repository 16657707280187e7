// How a CUDA tensor travels between ranks: NCCL, CUDA-aware MPI, or MPI through a host
// copy. The collectives and point-to-point calls (communicator.cpp) ask these functions
// which path to take; the group's NCCL communicator is created and launched from here.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support
#endif

#include "comm/device_sharing.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/request_state.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"

namespace tessera {

// ---------------------------------------------------------------------------
// NCCL path for CUDA tensors
// ---------------------------------------------------------------------------

// CUDA tensors take NCCL unless TESSERA_NCCL=0 or two ranks of this group share a GPU
// (NCCL refuses that communicator): then they are staged through host memory over MPI,
// the path every collective below takes for a tensor MPI cannot address. The sharing
// check runs once per group, on prepare_device or on its first CUDA collective (all
// ranks reach either in the same order): one gather of the ranks' device UUIDs.
bool Communicator::uses_nccl(Device device) {
  if (!device.is_cuda() || !detail::nccl_enabled()) return false;
  if (nccl_path_ == NcclPath::undecided) {
    constexpr int kUuidChars = 32;
    std::string mine = detail::cuda_device_uuid(device.index);
    mine.resize(kUuidChars, '0');
    std::vector<char> all(static_cast<std::size_t>(kUuidChars) * static_cast<std::size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    TESSERA_CHECK_MPI(MPI_Iallgather(mine.data(), kUuidChars, MPI_CHAR, all.data(), kUuidChars, MPI_CHAR, comm_,
                                     &request));
    detail::wait_request(request, wait_, {"the device-sharing check (MPI_Iallgather of GPU UUIDs)", comm_});
    std::vector<std::string> uuids;
    for (int r = 0; r < size_; ++r) uuids.emplace_back(all.data() + r * kUuidChars, kUuidChars);
    const detail::SharedDevice shared = detail::first_shared_device(uuids);
    nccl_path_ = shared.found() ? NcclPath::staged : NcclPath::nccl;
    static bool noticed = false;  // one line per process, however many groups share
    if (shared.found() && rank_ == 0 && !noticed) {
      noticed = true;
      std::fprintf(stderr,
                   "tessera: ranks %d and %d of a %d-rank group share GPU %s; NCCL refuses that, so CUDA "
                   "collectives of such groups go through MPI with host staging\n",
                   shared.first, shared.second, size_, uuids[static_cast<std::size_t>(shared.first)].c_str());
    }
  }
  return nccl_path_ == NcclPath::nccl;
}

void Communicator::prepare_device(Device device) {
  // The host (and a group of one, whose collectives never communicate) has nothing to
  // decide: return before anything asks CUDA, so a CPU program never loads the plugin.
  if (!device.is_cuda() || size_ == 1) return;
  if (device.index == Device::kAutoIndex) {
    throw InvalidArgument(std::string("Communicator::prepare_device") +
                          ": cuda:auto names no device; pass the resolved one (Mesh::device())");
  }
  if (uses_nccl(device)) {
    // Created here rather than inside the first collective, which then costs only
    // itself (ncclCommInitRank is collective and slow).
    nccl_for(device, "prepare_device");
  }
}

detail::NcclCommunicator& Communicator::nccl_for(Device device, const char* op) {
  if (!nccl_) nccl_ = detail::NcclCommunicator::create(comm_, rank_, size_, device.index);
  if (nccl_->device() != device.index) {
    throw InvalidArgument(std::string("Communicator::") + op + ": " + device.str() + " is not cuda:" +
                          std::to_string(nccl_->device()) +
                          ", the device this group's NCCL communicator was created for");
  }
  return *nccl_;
}

CommRequest Communicator::nccl_launch(const detail::FlightOp& what, bool blocking, std::function<void()> waiter,
                                      std::vector<Tensor> keep_alive) {
  ++stats_.nccl_calls;
  stats_.bytes += what.bytes;
  std::uint64_t ticket = 0;
  note_posted(what, true, ticket);
  if (blocking) {
    waiter();
    if (flight_) flight_->complete(ticket);
    return {};
  }
  // No MPI request: CommRequest::wait() finds MPI_REQUEST_NULL complete at once and
  // runs `finish`, which is the NCCL waiter (event + async-error polling).
  auto state = std::make_unique<CommRequest::State>();
  state->wait = wait_;
  state->finish = std::move(waiter);
  state->keep_alive = std::move(keep_alive);
  if (ticket != 0) state->flight = {flight_, ticket};
  return CommRequest(std::move(state));
}

bool mpi_cuda_aware() {
  if (const char* value = std::getenv("TESSERA_MPI_CUDA_AWARE")) {
    if (std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    throw ConfigError(std::string("TESSERA_MPI_CUDA_AWARE=\"") + value + "\": expected 0 or 1");
  }
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS) return supported != 0;
  return false;
#elif defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() != 0;
#else
  return false;
#endif
}

bool mpi_can_address(Device device) { return device.is_host() || mpi_cuda_aware(); }

}  // namespace tessera
