// CUDA backend: device memory from cudaMalloc, copies with cudaMemcpy and a strided
// copy kernel. Every runtime call is checked (TESSERA_CHECK_CUDA) and runs with the
// tensor's device made current by a DeviceGuard, so callers never have to manage the
// runtime's per-thread "current device" themselves.
//
// All work is issued on the legacy default stream: it is ordered with the cudaMemcpy
// and cudaMemset calls here, so a copy_strided followed by copy_to_host needs no
// explicit synchronisation. Streams arrive with the compute operations.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.hpp"
#include "backend/registry.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/device.hpp"
#include "tessera/error.hpp"

namespace tessera {
namespace detail {
namespace {

// Makes `device_index` the current device for its lifetime and restores the previous
// one afterwards, so a tessera call never changes the device the caller's own CUDA
// code runs on. Device::kAutoIndex (or any negative index) means "the current device".
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_index) {
    TESSERA_CHECK_CUDA(cudaGetDevice(&previous_));
    if (device_index >= 0 && device_index != previous_) {
      TESSERA_CHECK_CUDA(cudaSetDevice(device_index));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    // A destructor cannot throw; restoring a device that was current a moment ago only
    // fails when the context is already broken, which the next checked call reports.
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

std::string device_name(int device_index) {
  return Device{DeviceType::cuda, device_index}.str();
}

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
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += step) {
    dst[strided_offset(i, dst_layout)] = src[strided_offset(i, src_layout)];
  }
}

__global__ void copy_strided_bytes_kernel(unsigned char* dst, StridedLayout dst_layout,
                                          const unsigned char* src, StridedLayout src_layout,
                                          std::int64_t count, std::size_t element_size) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += step) {
    unsigned char* out = dst + strided_offset(i, dst_layout) * element_size;
    const unsigned char* in = src + strided_offset(i, src_layout) * element_size;
    for (std::size_t b = 0; b < element_size; ++b) out[b] = in[b];
  }
}

constexpr int kThreadsPerBlock = 256;
// The grid-stride loop makes any grid correct; capping it keeps huge copies from
// launching millions of blocks that each do one element's index math.
constexpr std::int64_t kMaxBlocks = 4096;

bool aligned_to(const void* ptr, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0;
}

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
  std::string name() const override { return "cuda"; }

  // Plain cudaMalloc for now: every tensor allocation is a synchronising driver call.
  // A caching allocator (size-bucketed free lists per device) replaces this in a later
  // issue, behind this same interface.
  void* allocate(std::size_t bytes, int device_index) override {
    check_device_visible(device_index);
    if (bytes == 0) return nullptr;
    DeviceGuard guard(device_index);
    void* ptr = nullptr;
    TESSERA_CHECK_CUDA(cudaMalloc(&ptr, bytes));
    return ptr;
  }

  void deallocate(void* ptr, std::size_t, int device_index) noexcept override {
    if (ptr == nullptr) return;
    // Called from Tensor storage destructors, which cannot throw. cudaFree fails only
    // when the context is already broken (a sticky error the next checked call reports)
    // or is being torn down at process exit, when the memory goes with it anyway.
    try {
      DeviceGuard guard(device_index);
      if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    } catch (...) {
    }
  }

  void fill_zero(void* ptr, std::size_t bytes, int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaMemset(ptr, 0, bytes));
  }

  void copy_to_host(void* host_dst, const void* src, std::size_t bytes,
                    int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes,
                      int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
  }

  void copy_strided(void* dst, const StridedLayout& dst_layout, const void* src,
                    const StridedLayout& src_layout, std::size_t element_size,
                    int device_index) override {
    const std::int64_t count = layout_numel(src_layout);
    if (count == 0 || element_size == 0) return;
    DeviceGuard guard(device_index);
    const auto blocks = static_cast<unsigned>(
        std::min<std::int64_t>((count + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
    const bool aligned = aligned_to(dst, element_size) && aligned_to(src, element_size);
    if (aligned && element_size == 2) {
      launch<std::uint16_t>(blocks, dst, dst_layout, src, src_layout, count);
    } else if (aligned && element_size == 4) {
      launch<std::uint32_t>(blocks, dst, dst_layout, src, src_layout, count);
    } else if (aligned && element_size == 8) {
      launch<std::uint64_t>(blocks, dst, dst_layout, src, src_layout, count);
    } else {
      copy_strided_bytes_kernel<<<blocks, kThreadsPerBlock>>>(
          static_cast<unsigned char*>(dst), dst_layout, static_cast<const unsigned char*>(src),
          src_layout, count, element_size);
    }
    // A launch reports configuration errors only through the "last error".
    TESSERA_CHECK_CUDA(cudaGetLastError());
  }

  void synchronize(int device_index) override {
    DeviceGuard guard(device_index);
    TESSERA_CHECK_CUDA(cudaDeviceSynchronize());
  }

 private:
  template <class Word>
  static void launch(unsigned blocks, void* dst, const StridedLayout& dst_layout,
                     const void* src, const StridedLayout& src_layout, std::int64_t count) {
    copy_strided_kernel<Word><<<blocks, kThreadsPerBlock>>>(
        static_cast<Word*>(dst), dst_layout, static_cast<const Word*>(src), src_layout, count);
  }

  // Turns "no GPU here" into an error that says which tensor device was asked for and
  // why the runtime sees none, instead of cudaSetDevice's bare "invalid device ordinal".
  static void check_device_visible(int device_index) {
    const int count = cuda_device_count();
    if (count == 0) {
      throw CudaError("a tensor was requested on " + device_name(device_index) +
                      " but no CUDA device is visible to this process: " +
                      cuda_unavailable_reason());
    }
    if (device_index >= count) {
      throw CudaError("a tensor was requested on " + device_name(device_index) + " but only " +
                      std::to_string(count) + " CUDA device(s) are visible to this process" +
                      " (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
    }
  }
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace detail

bool cuda_backend_built() noexcept { return true; }

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // Without a GPU (or driver) this fails; the failure is the answer "none", and it
    // must not linger as the runtime's last error for an unrelated later check.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  std::string reason;
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    const char* name = cudaGetErrorName(status);
    const char* text = cudaGetErrorString(status);
    reason = std::string("cudaGetDeviceCount: ") + (name ? name : "unknown error") + ": " +
             (text ? text : "unknown");
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

}  // namespace tessera
