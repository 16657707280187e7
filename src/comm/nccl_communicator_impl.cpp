// The NCCL communicator for CUDA tensors (see nccl_communicator.hpp). Part of the CUDA
// plugin (backend/cuda/CMakeLists.txt), compiled only when NCCL was found: libtessera
// reaches create_nccl_communicator through the plugin's table, never by linking NCCL.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_runtime.hpp"
#include "comm/nccl_check.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/watchdog.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::i64: return ncclInt64;
  }
  throw InternalError("nccl_type: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;  // NCCL >= 2.10; floating dtypes only (checked by the caller)
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  throw InternalError("nccl_op: unknown op");
}

class NcclComm final : public NcclCommunicator, public std::enable_shared_from_this<NcclComm> {
 public:
  NcclComm(ncclComm_t comm, int device) : comm_(comm), device_(device) {}
  ~NcclComm() override {
    // ncclCommDestroy waits for this rank's queued operations; errors at teardown have
    // no one left to report to. The point-to-point stream goes after the operations on it.
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
    // (A stream names its device, so no device guard, whose constructor could throw.)
    if (p2p_stream_ != nullptr) (void)cudaStreamDestroy(p2p_stream_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const override { return device_; }

  std::function<void()> all_reduce(Tensor& t, ReduceOp op, const WaitOptions& wait) override {
    return run("ncclAllReduce", wait, [&](cudaStream_t s) {
      return ncclAllReduce(t.data(), t.data(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                           comm_, s);
    });
  }
  std::function<void()> all_gather(const Tensor& in, Tensor& out, const WaitOptions& wait) override {
    return run("ncclAllGather", wait, [&](cudaStream_t s) {
      return ncclAllGather(in.data(), out.data(), static_cast<std::size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                           s);
    });
  }
  std::function<void()> reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const WaitOptions& wait) override {
    return run("ncclReduceScatter", wait, [&](cudaStream_t s) {
      return ncclReduceScatter(in.data(), out.data(), static_cast<std::size_t>(out.numel()), nccl_type(in.dtype()),
                               nccl_op(op), comm_, s);
    });
  }
  std::function<void()> broadcast(Tensor& t, int root, const WaitOptions& wait) override {
    return run("ncclBroadcast", wait, [&](cudaStream_t s) {
      return ncclBroadcast(t.data(), t.data(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), root, comm_,
                           s);
    });
  }

  Pending send(const Tensor& t, int peer, const WaitOptions& wait) override {
    return message("ncclSend", wait, [&](cudaStream_t s) {
      return ncclSend(t.data(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), peer, comm_, s);
    });
  }
  Pending recv(Tensor& t, int peer, const WaitOptions& wait) override {
    return message("ncclRecv", wait, [&](cudaStream_t s) {
      return ncclRecv(t.data(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), peer, comm_, s);
    });
  }

 private:
  using Event = std::shared_ptr<CUevent_st>;

  static Event make_event() {
    cudaEvent_t raw = nullptr;
    TESSERA_CHECK_CUDA(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming));
    return Event(raw, [](cudaEvent_t e) { (void)cudaEventDestroy(e); });
  }

  // Queues `call` on `stream` and returns an event recorded after it. The caller holds
  // a DeviceGuard for device_.
  template <class Call>
  Event queue(const char* name, cudaStream_t stream, Call&& call) {
    const ncclResult_t status = call(stream);
    if (status != ncclSuccess && status != ncclInProgress) {
      throw_nccl_error(static_cast<int>(status), name, __FILE__, __LINE__);
    }
    Event done = make_event();
    TESSERA_CHECK_CUDA(cudaEventRecord(done.get(), stream));
    return done;
  }

  // A collective: queued on the compute stream (ordered with the kernels that produced
  // the data). The waiter holds this communicator alive (shared_from_this).
  template <class Call>
  std::function<void()> run(const char* name, const WaitOptions& wait, Call&& call) {
    DeviceGuard guard(device_);
    Event done = queue(name, compute_stream(device_), std::forward<Call>(call));
    std::shared_ptr<NcclComm> self = shared_from_this();
    const std::string op = name;
    return [self, done, wait, op]() { self->wait_for(done.get(), wait, op); };
  }

  // A message: queued on this channel's own stream after the compute stream's work so
  // far (see nccl_communicator.hpp), never on the compute stream itself.
  template <class Call>
  Pending message(const char* name, const WaitOptions& wait, Call&& call) {
    DeviceGuard guard(device_);
    if (p2p_stream_ == nullptr) TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&p2p_stream_, cudaStreamNonBlocking));
    Event before = make_event();
    TESSERA_CHECK_CUDA(cudaEventRecord(before.get(), compute_stream(device_)));
    TESSERA_CHECK_CUDA(cudaStreamWaitEvent(p2p_stream_, before.get(), 0));
    Event done = queue(name, p2p_stream_, std::forward<Call>(call));
    std::shared_ptr<NcclComm> self = shared_from_this();
    const std::string op = name;
    return {[self, done, wait, op]() { self->wait_for(done.get(), wait, op); },
            [self, done, op]() { return self->poll(done.get(), op); }};
  }

  // One look at `event`: true once it completed. While it is pending, a peer that failed
  // (or vanished) shows up as NCCL's asynchronous error, not as a hang: the
  // communicator is aborted and NcclError raised.
  bool poll(cudaEvent_t event, const std::string& op) {
    DeviceGuard guard(device_);
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) throw_cuda_error(static_cast<int>(status), op.c_str(), __FILE__, __LINE__);
    if (comm_ == nullptr) throw NcclError(op + ": the NCCL communicator was aborted by an earlier failure");
    ncclResult_t async = ncclSuccess;
    TESSERA_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;  // aborted: the destructor must not destroy it again
      throw NcclError(op + " failed asynchronously: " + ncclGetErrorString(async) +
                      " (the NCCL communicator was aborted; recreate the process group)");
    }
    return false;
  }

  void wait_for(cudaEvent_t event, const WaitOptions& wait, const std::string& op) {
    const double timeout = collective_timeout();
    const auto start = std::chrono::steady_clock::now();
    while (!poll(event, op)) {
      if (timeout > 0) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > timeout) watchdog_abort(WaitSite{op.c_str()}, waited);
      }
      if (wait.policy == WaitPolicy::sleep) std::this_thread::sleep_for(wait.sleep_interval);
      else std::this_thread::yield();
    }
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cudaStream_t p2p_stream_ = nullptr;  // point-to-point messages only (created on the first)
};

}  // namespace

std::shared_ptr<NcclCommunicator> create_nccl_communicator(MPI_Comm comm, int rank, int size, int device) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  // Rank 0's failure to draw an id must not leave the others waiting in the broadcast:
  // the status travels with the id.
  struct {
    int status;
    ncclUniqueId id;
  } message{};
  if (rank == 0) message.status = static_cast<int>(ncclGetUniqueId(&message.id));
  TESSERA_CHECK_MPI(MPI_Bcast(&message, static_cast<int>(sizeof(message)), MPI_BYTE, 0, comm));
  if (message.status != ncclSuccess) {
    throw_nccl_error(message.status, "ncclGetUniqueId (on rank 0 of the group)", __FILE__, __LINE__);
  }
  id = message.id;
  DeviceGuard guard(device);
  ncclComm_t nccl = nullptr;
  TESSERA_CHECK_NCCL(ncclCommInitRank(&nccl, size, id, rank));
  return std::make_shared<NcclComm>(nccl, device);
}

}  // namespace tessera::detail
