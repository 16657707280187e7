#pragma once
// Index math for strided tensors, shared by the host copy loop and the CUDA copy
// kernel (both walk a strided layout one linear element index at a time).

#include <cstdint>

#include "tessera/detail/host_device.hpp"

namespace tessera::detail {

inline constexpr int kMaxDims = 8;

// Shape and strides (in elements) of one strided layout, fixed-size so it can be
// passed by value to a kernel.
struct StridedLayout {
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};
};

// Element offset of the `linear`-th element (row-major order over `layout.shape`).
TESSERA_HOST_DEVICE inline std::int64_t strided_offset(std::int64_t linear,
                                                       const StridedLayout& layout) {
  std::int64_t offset = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const std::int64_t extent = layout.shape[d];
    offset += (linear % extent) * layout.strides[d];
    linear /= extent;
  }
  return offset;
}

// Whether `layout` walks one run of memory in linear order (row-major contiguous;
// extents of 1 may carry any stride). A copy between two such layouts of one shape is
// a single block copy, which the CUDA backend hands to cudaMemcpyAsync.
inline bool is_row_major_contiguous(const StridedLayout& layout) {
  std::int64_t expected = 1;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    if (layout.shape[d] != 1 && layout.strides[d] != expected) return false;
    expected *= layout.shape[d];
  }
  return true;
}

}  // namespace tessera::detail
