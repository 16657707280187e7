// CUDA backend, memory half: a caching allocator over cudaMalloc, one compute stream per
// device, pinned host staging buffers for host<->device copies, and a strided copy
// kernel. Every runtime call is checked (TESSERA_CHECK_CUDA) and runs with the
// tensor's device made current by a DeviceGuard, so callers never manage the runtime's
// per-thread "current device" themselves. The compute entries are CudaCompute's
// (cuda_compute.hpp lists the file of each).
//
// Stream model (cuda_runtime.hpp): all work on a device is queued on its compute
// stream. Copies to the host wait for that stream, so a kernel followed by
// copy_to_host needs no explicit synchronisation, and a freed block can be reused by
// later work without events.

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/compute.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"
#include "backend/cuda_plugin.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/device.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera {
namespace detail {
namespace {

// Enough for any node in service (8 GPUs is the common maximum; 64 leaves room).
constexpr int kMaxDevices = 64;

std::string device_name(int device_index) { return Device{DeviceType::cuda, device_index}.str(); }

void check_device_slot(int device) {
  if (device < 0 || device >= kMaxDevices) {
    throw CudaError("CUDA device ordinal " + std::to_string(device) + " is outside tessera's table of " +
                    std::to_string(kMaxDevices) + " devices");
  }
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

struct StreamTable {
  std::mutex mutex;
  std::array<cudaStream_t, kMaxDevices> streams{};
};

StreamTable& stream_table() {
  static StreamTable table;
  return table;
}

// ---------------------------------------------------------------------------
// Caching allocator: per device, one free list per size bucket (caching_bucket_bytes).
// A request takes a block of its bucket when one is free, otherwise cudaMalloc's a new
// one; when cudaMalloc runs out of memory, every cached block of the device is
// released and the allocation retried once. Freed blocks go back to their bucket, not
// to the driver (cudaFree synchronises the whole device).
// ---------------------------------------------------------------------------

class CachingAllocator {
 public:
  void* allocate(std::size_t bytes, int device) {
    check_device_slot(device);
    const std::size_t bucket = caching_bucket_bytes(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = pools_[device][bucket];
      if (!list.empty()) {
        void* ptr = list.back();
        list.pop_back();
        cached_bytes_[device] -= bucket;
        in_use_bytes_[device] += bucket;
        return ptr;
      }
    }
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bucket);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it before the retry
      release_cached(device);
      status = cudaMalloc(&ptr, bucket);
    }
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      std::size_t in_use = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        in_use = in_use_bytes_[device];
      }
      throw CudaError("cudaMalloc of " + std::to_string(bucket) + " bytes (a request of " + std::to_string(bytes) +
                      " bytes) on " + device_name(device) + " failed after releasing the cache: " +
                      cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + " (" +
                      std::to_string(in_use) + " bytes in use by tessera tensors on that device)");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_bytes_[device] += bucket;
    return ptr;
  }

  void deallocate(void* ptr, std::size_t bytes, int device) noexcept {
    if (ptr == nullptr || device < 0 || device >= kMaxDevices) return;
    const std::size_t bucket = caching_bucket_bytes(bytes);
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      pools_[device][bucket].push_back(ptr);
      cached_bytes_[device] += bucket;
      in_use_bytes_[device] -= bucket;
    } catch (...) {
      // push_back could not grow the list: give the block back to the driver instead.
      if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    }
  }

  // Frees every cached block of `device` (the device must be current).
  void release_cached(int device) {
    check_device_slot(device);
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [bucket, list] : pools_[device]) {
        blocks.insert(blocks.end(), list.begin(), list.end());
        list.clear();
      }
      cached_bytes_[device] = 0;
    }
    for (void* ptr : blocks) TESSERA_CHECK_CUDA(cudaFree(ptr));
  }

  ~CachingAllocator() {
    // At process exit the runtime may already be unloading (cudaErrorCudartUnloading);
    // the memory goes with the context either way.
    for (int device = 0; device < kMaxDevices; ++device) {
      for (auto& [bucket, list] : pools_[device]) {
        for (void* ptr : list) {
          if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
        }
      }
    }
  }

 private:
  std::mutex mutex_;
  std::array<std::unordered_map<std::size_t, std::vector<void*>>, kMaxDevices> pools_;
  std::array<std::size_t, kMaxDevices> cached_bytes_{};
  std::array<std::size_t, kMaxDevices> in_use_bytes_{};
};

CachingAllocator& allocator() {
  static CachingAllocator instance;
  return instance;
}

// ---------------------------------------------------------------------------
// Pinned staging: two page-locked buffers per device, used alternately so the copy of
// one chunk overlaps the host memcpy of the other. Host memory that is already pinned
// (cudaMallocHost, cudaHostRegister) is copied directly.
// ---------------------------------------------------------------------------

constexpr std::size_t kStagingChunk = std::size_t{4} << 20;

struct PinnedHost {
  void* ptr = nullptr;
  PinnedHost() = default;
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  }
};

struct StagingSlot {
  std::mutex mutex;
  PinnedHost buffers[2];
  cudaEvent_t done[2] = {nullptr, nullptr};  // the last copy out of / into each buffer
};

StagingSlot& staging(int device) {
  static std::array<StagingSlot, kMaxDevices> slots;
  check_device_slot(device);
  StagingSlot& slot = slots[device];
  // Called with the slot's mutex not yet held: allocation happens under it below.
  return slot;
}

void ensure_staging(StagingSlot& slot) {
  for (int b = 0; b < 2; ++b) {
    if (slot.buffers[b].ptr == nullptr) TESSERA_CHECK_CUDA(cudaMallocHost(&slot.buffers[b].ptr, kStagingChunk));
    if (slot.done[b] == nullptr) {
      TESSERA_CHECK_CUDA(cudaEventCreateWithFlags(&slot.done[b], cudaEventDisableTiming));
    }
  }
}

bool is_pinned_host(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

void stage_to_device(void* dst, const void* host_src, std::size_t bytes, int device, cudaStream_t stream) {
  if (is_pinned_host(host_src)) {
    TESSERA_CHECK_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    // The caller may free or reuse its buffer on return (Backend contract).
    TESSERA_CHECK_CUDA(cudaStreamSynchronize(stream));
    return;
  }
  StagingSlot& slot = staging(device);
  std::lock_guard<std::mutex> lock(slot.mutex);
  ensure_staging(slot);
  const auto* src = static_cast<const unsigned char*>(host_src);
  auto* out = static_cast<unsigned char*>(dst);
  int b = 0;
  for (std::size_t done = 0; done < bytes; done += kStagingChunk, b ^= 1) {
    const std::size_t n = std::min(kStagingChunk, bytes - done);
    // The buffer's previous upload must have left it before it is overwritten.
    TESSERA_CHECK_CUDA(cudaEventSynchronize(slot.done[b]));
    std::memcpy(slot.buffers[b].ptr, src + done, n);
    TESSERA_CHECK_CUDA(cudaMemcpyAsync(out + done, slot.buffers[b].ptr, n, cudaMemcpyHostToDevice, stream));
    TESSERA_CHECK_CUDA(cudaEventRecord(slot.done[b], stream));
  }
  // The source has been copied into the staging buffers: the caller may reuse it. The
  // uploads themselves stay stream-ordered.
}

void stage_to_host(void* host_dst, const void* src, std::size_t bytes, int device, cudaStream_t stream) {
  if (is_pinned_host(host_dst)) {
    TESSERA_CHECK_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    TESSERA_CHECK_CUDA(cudaStreamSynchronize(stream));
    return;
  }
  StagingSlot& slot = staging(device);
  std::lock_guard<std::mutex> lock(slot.mutex);
  ensure_staging(slot);
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(host_dst);
  const std::size_t chunks = (bytes + kStagingChunk - 1) / kStagingChunk;
  auto issue = [&](std::size_t chunk) {
    const int b = static_cast<int>(chunk % 2);
    const std::size_t offset = chunk * kStagingChunk;
    const std::size_t n = std::min(kStagingChunk, bytes - offset);
    TESSERA_CHECK_CUDA(cudaMemcpyAsync(slot.buffers[b].ptr, in + offset, n, cudaMemcpyDeviceToHost, stream));
    TESSERA_CHECK_CUDA(cudaEventRecord(slot.done[b], stream));
  };
  issue(0);
  for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
    // Queue the next download before draining this one, so the two overlap.
    if (chunk + 1 < chunks) issue(chunk + 1);
    const int b = static_cast<int>(chunk % 2);
    TESSERA_CHECK_CUDA(cudaEventSynchronize(slot.done[b]));
    const std::size_t offset = chunk * kStagingChunk;
    std::memcpy(out + offset, slot.buffers[b].ptr, std::min(kStagingChunk, bytes - offset));
  }
}

// ---------------------------------------------------------------------------
// Strided copy kernels
// ---------------------------------------------------------------------------

std::int64_t layout_numel(const StridedLayout& layout) {
  std::int64_t count = 1;
  for (int d = 0; d < layout.ndim; ++d) count *= layout.shape[d];
  return count;
}

// dst[dst_layout(i)] = src[src_layout(i)] for every linear index i. `Word` is the
// element type when the element size is 2, 4 or 8 bytes and both pointers are aligned
// to it; otherwise the fallback copies `element_size` bytes one at a time. The index
// math is strided_offset, the same function the host backend's loop calls.
template <class Word>
__global__ void copy_strided_kernel(Word* dst, StridedLayout dst_layout, const Word* src,
                                    StridedLayout src_layout, std::int64_t count) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    dst[strided_offset(i, dst_layout)] = src[strided_offset(i, src_layout)];
  }
}

__global__ void copy_strided_bytes_kernel(unsigned char* dst, StridedLayout dst_layout, const unsigned char* src,
                                          StridedLayout src_layout, std::int64_t count, std::size_t element_size) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    unsigned char* out = dst + strided_offset(i, dst_layout) * element_size;
    const unsigned char* in = src + strided_offset(i, src_layout) * element_size;
    for (std::size_t b = 0; b < element_size; ++b) out[b] = in[b];
  }
}

bool aligned_to(const void* ptr, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0;
}

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
  std::string name() const override { return "cuda"; }

  void* allocate(std::size_t bytes, int device_index) override {
    check_device_visible(device_index);
    if (bytes == 0) return nullptr;
    DeviceGuard guard(device_index);
    return caching_allocate(bytes, guard.device());
  }

  void deallocate(void* ptr, std::size_t bytes, int device_index) noexcept override {
    // Called from Tensor storage destructors, which cannot throw: the block goes back
    // to its free list (no driver call at all).
    caching_deallocate(ptr, bytes, device_index);
  }

  void fill_zero(void* ptr, std::size_t bytes, int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaMemsetAsync(ptr, 0, bytes, compute_stream(guard.device())));
  }

  void copy_to_host(void* host_dst, const void* src, std::size_t bytes, int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    stage_to_host(host_dst, src, bytes, guard.device(), compute_stream(guard.device()));
  }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes, int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    stage_to_device(dst, host_src, bytes, guard.device(), compute_stream(guard.device()));
  }

  void copy_strided(void* dst, const StridedLayout& dst_layout, const void* src, const StridedLayout& src_layout,
                    std::size_t element_size, int device_index) override {
    const std::int64_t count = layout_numel(src_layout);
    if (count == 0 || element_size == 0) return;
    DeviceGuard guard(device_index);
    cudaStream_t stream = compute_stream(guard.device());
    // Two contiguous layouts (of one shape: Tensor::copy_from checks it) are one block of
    // bytes, which the copy engine moves faster than a kernel walking indices.
    if (is_row_major_contiguous(dst_layout) && is_row_major_contiguous(src_layout)) {
      TESSERA_CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * element_size,
                                         cudaMemcpyDeviceToDevice, stream));
      return;
    }
    const unsigned blocks = grid_for(count);
    const bool aligned = aligned_to(dst, element_size) && aligned_to(src, element_size);
    if (aligned && element_size == 2) {
      launch<std::uint16_t>(blocks, stream, dst, dst_layout, src, src_layout, count);
    } else if (aligned && element_size == 4) {
      launch<std::uint32_t>(blocks, stream, dst, dst_layout, src, src_layout, count);
    } else if (aligned && element_size == 8) {
      launch<std::uint64_t>(blocks, stream, dst, dst_layout, src, src_layout, count);
    } else {
      copy_strided_bytes_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(
          static_cast<unsigned char*>(dst), dst_layout, static_cast<const unsigned char*>(src), src_layout, count,
          element_size);
    }
    TESSERA_CHECK_LAUNCH();
  }

  void synchronize(int device_index) override {
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaStreamSynchronize(compute_stream(guard.device())));
    TESSERA_CHECK_CUDA(cudaDeviceSynchronize());
  }

  Compute& compute() override { return cuda_compute(); }

  void require_usable(const Tensor& t, const std::string& who) override {
    if (cuda_runtime_device_count() == 0) {
      throw UnsupportedError(who + " " + t.str() + " is a CUDA tensor, but the CUDA compute backend cannot run it: " +
                             cuda_runtime_unavailable_reason());
    }
    if (!t.owns_storage() && t.numel() > 0 && !cuda_compute().is_device_memory(t.data(), t.device().index)) {
      throw UnsupportedError(who + " " + t.str() +
                             " is a view of memory that is not CUDA device memory; the CUDA compute backend needs "
                             "cudaMalloc'd or managed memory");
    }
  }

 private:
  template <class Word>
  static void launch(unsigned blocks, cudaStream_t stream, void* dst, const StridedLayout& dst_layout,
                     const void* src, const StridedLayout& src_layout, std::int64_t count) {
    copy_strided_kernel<Word><<<blocks, kThreadsPerBlock, 0, stream>>>(
        static_cast<Word*>(dst), dst_layout, static_cast<const Word*>(src), src_layout, count);
  }

  // Turns "no GPU here" into an error that says which tensor device was asked for and
  // why the runtime sees none, instead of cudaSetDevice's bare "invalid device ordinal".
  static void check_device_visible(int device_index) {
    const int count = cuda_runtime_device_count();
    if (count == 0) {
      throw CudaError("a tensor was requested on " + device_name(device_index) +
                      " but no CUDA device is visible to this process: " + cuda_runtime_unavailable_reason());
    }
    if (device_index >= count) {
      throw CudaError("a tensor was requested on " + device_name(device_index) + " but only " +
                      std::to_string(count) + " CUDA device(s) are visible to this process" + " (cuda:0 to cuda:" +
                      std::to_string(count - 1) + ")");
    }
  }
};

}  // namespace

cudaStream_t compute_stream(int device) {
  check_device_slot(device);
  StreamTable& table = stream_table();
  std::lock_guard<std::mutex> lock(table.mutex);
  cudaStream_t& stream = table.streams[device];
  if (stream == nullptr) {
    // Non-blocking: the legacy default stream (a caller's own cudaMemcpy) does not
    // serialise against tessera's work, and vice versa.
    TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  return stream;
}

// A cache miss calls cudaMalloc, which allocates on the *current* device: make `device`
// current, or a caller without a guard of its own (a DeviceScratch) would file another
// GPU's memory under `device`.
void* caching_allocate(std::size_t bytes, int device) {
  DeviceGuard guard(device);
  return allocator().allocate(bytes, guard.device());
}
void caching_deallocate(void* ptr, std::size_t bytes, int device) noexcept {
  allocator().deallocate(ptr, bytes, device);
}
void caching_release_cached(int device) {
  DeviceGuard guard(device);
  // Blocks still queued for reuse may be in use by queued work: finish it first.
  TESSERA_CHECK_CUDA(cudaStreamSynchronize(compute_stream(guard.device())));
  allocator().release_cached(guard.device());
}

Backend& cuda_backend_instance() {
  static CudaBackend backend;
  return backend;
}

int cuda_runtime_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // Without a GPU (or driver) this fails; the failure is the answer "none", and it
    // must not linger as the runtime's last error for an unrelated later check.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_runtime_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  std::string reason;
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    const char* name = cudaGetErrorName(status);
    const char* text = cudaGetErrorString(status);
    reason = std::string("cudaGetDeviceCount: ") + (name ? name : "unknown error") + ": " + (text ? text : "unknown");
  } else if (count == 0) {
    reason = "cudaGetDeviceCount: the CUDA runtime reports 0 devices";
  } else {
    return {};
  }
  // The usual cause on a GPU node is a job script that hid the devices.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    reason += std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")";
  }
  return reason;
}

std::string cuda_runtime_device_uuid(int device) {
  cudaDeviceProp properties{};
  TESSERA_CHECK_CUDA(cudaGetDeviceProperties(&properties, device));
  std::string hex;
  for (unsigned char byte : properties.uuid.bytes) {
    char digits[3];
    std::snprintf(digits, sizeof(digits), "%02x", byte);
    hex += digits;
  }
  return hex;
}

}  // namespace detail
}  // namespace tessera
