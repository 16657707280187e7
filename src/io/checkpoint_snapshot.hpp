#pragma once
// Private: the host snapshot of an asynchronous save (io/async_checkpoint.cpp). The
// step's tensors are copied into buffers that outlive the step, so training may change
// them while a writer thread saves the copy. The buffers are kept from one save to the
// next (the same tensors have the same sizes): after the first save a snapshot is a
// plain memory copy, without allocation or first-touch page faults.

#include <cstddef>
#include <vector>

#include "tessera/device.hpp"
#include "tessera/tensor.hpp"

namespace tessera::io::detail {

class SnapshotBuffers {
 public:
  SnapshotBuffers() = default;
  SnapshotBuffers(const SnapshotBuffers&) = delete;
  SnapshotBuffers& operator=(const SnapshotBuffers&) = delete;
  ~SnapshotBuffers();

  // A contiguous host copy of `value` in the buffer of slot `index` (slots are the
  // save's entries in order). Device tensors land in pinned host memory (the device's
  // backend allocates it: the copy runs at the link's speed); host tensors in memory of
  // the host backend. The copy is complete when this returns. The returned tensor views
  // the buffer: it is valid until the slot is copied into again or this is destroyed.
  Tensor copy(std::size_t index, const Tensor& value);

  // Bytes held over all slots.
  std::size_t bytes() const;

 private:
  struct Buffer {
    void* data = nullptr;
    std::size_t bytes = 0;
    Device allocator;  // whose allocate_pinned gave it (its free_pinned returns it)
  };
  void release(Buffer& b) noexcept;
  std::vector<Buffer> buffers_;
};

}  // namespace tessera::io::detail
