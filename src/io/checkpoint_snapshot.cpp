// The host snapshot of an asynchronous save: reused buffers, pinned for device tensors.
#include "io/checkpoint_snapshot.hpp"

#include "backend/compute.hpp"

namespace tessera::io::detail {

SnapshotBuffers::~SnapshotBuffers() {
  for (Buffer& b : buffers_) release(b);
}

void SnapshotBuffers::release(Buffer& b) noexcept {
  if (b.data != nullptr) tessera::detail::compute_for(b.allocator).free_pinned(b.data);
  b = Buffer{};
}

Tensor SnapshotBuffers::copy(std::size_t index, const Tensor& value) {
  if (buffers_.size() <= index) buffers_.resize(index + 1);
  Buffer& b = buffers_[index];
  // Pinned memory comes from the backend of the tensor's device: page-locked host memory
  // for CUDA (the device-to-host copy runs at full speed and needs no staging), aligned
  // host memory for the host backend.
  const Device allocator = value.device().is_host() ? Device::host() : value.device();
  const std::size_t bytes = value.nbytes();
  if (b.data == nullptr || b.bytes != bytes || !(b.allocator == allocator)) {
    release(b);
    if (bytes > 0) {
      b.data = tessera::detail::compute_for(allocator).allocate_pinned(bytes);
      if (b.data == nullptr) throw IoError("checkpoint: cannot allocate " + std::to_string(bytes) + " bytes for the snapshot");
    }
    b.bytes = bytes;
    b.allocator = allocator;
  }
  if (bytes == 0) return Tensor::zeros(value.shape(), value.dtype());
  Tensor host = Tensor::view(b.data, value.shape(), value.dtype(), Device::host());
  host.copy_from(value);  // synchronous: the device's queue is drained for the copy
  return host;
}

std::size_t SnapshotBuffers::bytes() const {
  std::size_t total = 0;
  for (const Buffer& b : buffers_) total += b.bytes;
  return total;
}

}  // namespace tessera::io::detail
