#pragma once
// The compute interface every backend implements (host: OpenBLAS + loops; cuda: cuBLAS +
// kernels). Layers and tensors call this interface, never a vendor API. It covers memory
// and copies directly. The device compute entries (GEMM, element-wise kernels, reductions, packing)
// sit behind device_compute(), a private interface (src/backend/compute.hpp)
// that the layer code dispatches CUDA tensors to; the host backend has none, its
// compute lives in the host loops of ops/functional.

#include <cstddef>
#include <string>

#include "tessera/detail/strided_index.hpp"
#include "tessera/device.hpp"

namespace tessera {

class Tensor;

namespace detail {
class Compute;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual std::string name() const = 0;

  virtual void* allocate(std::size_t bytes, int device_index) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes, int device_index) noexcept = 0;
  virtual void fill_zero(void* ptr, std::size_t bytes, int device_index) = 0;

  // Contiguous byte copies between this backend's memory and host memory.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes,
                            int device_index) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes,
                              int device_index) = 0;
  // Element copy within this device: dst[dst_layout(i)] = src[src_layout(i)].
  // Both layouts have the same shape; offsets are in elements of `element_size` bytes.
  virtual void copy_strided(void* dst, const detail::StridedLayout& dst_layout,
                            const void* src, const detail::StridedLayout& src_layout,
                            std::size_t element_size, int device_index) = 0;
  // Blocks until queued work on the device is done (a no-op on the host).
  virtual void synchronize(int device_index) = 0;
  // The compute entries of this backend (src/backend/compute.hpp).
  virtual detail::Compute& compute() = 0;
  // Throws UnsupportedError (the message starts with `who`, then the tensor) when this
  // backend cannot run kernels on `t`: on CUDA, no device is visible, or `t` is a view of
  // memory the device cannot address. The host backend accepts every tensor.
  virtual void require_usable(const Tensor& t, const std::string& who) = 0;
};

// The backend serving `type`. Throws UnsupportedError when tessera was built without it,
// or when the CUDA backend's plugin (libtessera_cuda.so, loaded on this first request for
// a CUDA device; docs/building.md) cannot be loaded: the message names the file and why.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device device) { return backend_for(device.type); }

// backend_for(t.device()).require_usable(t, who), with the same `who`-first message when
// the build has no backend for t's device at all (a CUDA tensor without the CUDA
// backend): every check of an operation's operands goes through here.
void require_usable(const Tensor& t, const std::string& who);

// Whether this build has a CUDA backend, and how many devices it sees (0 when none is
// visible, the build has no CUDA or its plugin cannot be loaded: never throws). The
// device count, the reason and the library versions load the CUDA plugin; a program that
// never asks maps no CUDA library.
bool cuda_backend_built() noexcept;
int cuda_device_count() noexcept;
// Human-readable reason for cuda_device_count() == 0 ("built without CUDA",
// "cudaGetDeviceCount: no CUDA-capable device is detected", or why the plugin could not
// be loaded); empty when devices exist.
std::string cuda_unavailable_reason();
// "CUDA runtime 13.0, driver 12.4, cuBLAS 13.0.0, NCCL 2.27.7" or "built without CUDA":
// context for benchmark reports and error messages. Never throws.
std::string cuda_library_versions();

}  // namespace tessera
