#pragma once
// Private to src/backend/cuda (and src/comm/nccl_*): the CUDA runtime pieces every
// translation unit of the backend shares — the device guard, the per-device compute
// stream, the caching allocator and launch geometry. Pulls in the CUDA runtime header,
// so nothing outside src/backend and src/comm may include it (docs/architecture.md).
//
// Stream model: every operation tessera issues on device d (copies, memsets, kernels,
// cuBLAS, NCCL collectives) goes on one non-blocking stream per device,
// compute_stream(d). That single stream is what makes the caching allocator's reuse
// safe without events: a block freed by the host is handed out again only to work
// queued later on the same stream, which runs after every earlier use of the block.
// The one exception, the NCCL point-to-point channels of pipeline stages
// (nccl_communicator_impl.cpp), run on streams of their own: each message's stream
// first waits on an event of the compute stream, and its buffers stay alive (and so
// out of the allocator's hands) until the host has seen the message complete.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"

namespace tessera::detail {

class Compute;
// The CUDA backend's compute entries (cuda_compute.cu; the class: cuda_compute.hpp).
Compute& cuda_compute();

// Makes `device_index` the current device for its lifetime and restores the previous
// one afterwards, so a tessera call never changes the device the caller's own CUDA
// code runs on. A negative index (Device::kAutoIndex) means "the current device".
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_index) {
    TESSERA_CHECK_CUDA(cudaGetDevice(&previous_));
    if (device_index >= 0 && device_index != previous_) {
      TESSERA_CHECK_CUDA(cudaSetDevice(device_index));
      switched_ = true;
    }
    current_ = switched_ ? device_index : previous_;
  }
  ~DeviceGuard() {
    // A destructor cannot throw; restoring a device that was current a moment ago only
    // fails when the context is already broken, which the next checked call reports.
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  int device() const { return current_; }

 private:
  int previous_ = 0;
  int current_ = 0;
  bool switched_ = false;
};

// The stream all tessera work on `device` runs on (created on first use, never
// destroyed: it lives as long as the process's CUDA context). `device` must be the
// current device (callers hold a DeviceGuard).
cudaStream_t compute_stream(int device);

// Caching allocator entry points (cuda_backend.cu). Sizes are rounded to the bucket of
// caching_bucket_bytes (kernel_math.hpp).
void* caching_allocate(std::size_t bytes, int device);
void caching_deallocate(void* ptr, std::size_t bytes, int device) noexcept;
// Returns every cached (free) block of `device` to the driver.
void caching_release_cached(int device);

// Scratch device memory for one call: a block from the caching allocator, returned on
// destruction (stream-ordered, like every tensor).
class DeviceScratch {
 public:
  DeviceScratch(std::size_t bytes, int device)
      : ptr_(bytes ? caching_allocate(bytes, device) : nullptr), bytes_(bytes), device_(device) {}
  ~DeviceScratch() { caching_deallocate(ptr_, bytes_, device_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_;
  std::size_t bytes_;
  int device_;
};

inline constexpr int kThreadsPerBlock = 256;
// Grid-stride loops make any grid correct; capping it keeps huge launches from
// starting millions of blocks that each do one element's index math.
inline constexpr std::int64_t kMaxBlocks = 4096;

inline unsigned grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// A launch reports configuration errors only through the "last error".
#define TESSERA_CHECK_LAUNCH() TESSERA_CHECK_CUDA(cudaGetLastError())

}  // namespace tessera::detail
