#pragma once
// Index math of halo packing, shared by the host pack/unpack loops and the CUDA kernels:
// both walk one rectangle of a field one linear element index at a time, so the host
// tests exercise exactly what a kernel runs. It sits below the backends (floor 0) so
// the compute interface can take a rectangle without looking up at the domain floor.
//
// A field is a strided tensor (leading dims..., lat, lon) with up to kMaxDims dims; a
// HaloRect is a (rows x cols) rectangle of its (lat, lon) plane, repeated over every
// leading index. Rows may run backwards (lat_step = -1): that is how the across-the-pole
// halo reverses latitude without a second buffer pass. Elements are enumerated in the
// order (leading..., row, col), the order both ends of a message agree on.

#include <cstdint>

#include "tessera/detail/host_device.hpp"
#include "tessera/detail/strided_index.hpp"

namespace tessera::detail {

struct HaloRect {
  std::int64_t lat0 = 0;  // first row, index into the field's lat dim (halo included)
  std::int64_t lon0 = 0;  // first column
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t lat_step = 1;  // +1 or -1
};

// Elements in one copy of the rectangle (one leading index).
TESSERA_HOST_DEVICE inline std::int64_t halo_rect_area(const HaloRect& rect) {
  return rect.rows * rect.cols;
}

// Offset (in elements, from the field's first element) of the `linear`-th element of
// `rect` repeated over the leading dims of `field`. `field.ndim` >= 2; the last two
// dims of `field` are (lat, lon).
TESSERA_HOST_DEVICE inline std::int64_t halo_element_offset(std::int64_t linear, const StridedLayout& field,
                                                            const HaloRect& rect) {
  const int lat_dim = field.ndim - 2;
  const std::int64_t col = linear % rect.cols;
  linear /= rect.cols;
  const std::int64_t row = linear % rect.rows;
  linear /= rect.rows;
  std::int64_t offset = (rect.lat0 + row * rect.lat_step) * field.strides[lat_dim] +
                        (rect.lon0 + col) * field.strides[lat_dim + 1];
  // What remains of `linear` is the row-major index over the leading dims.
  for (int d = lat_dim - 1; d >= 0; --d) {
    offset += (linear % field.shape[d]) * field.strides[d];
    linear /= field.shape[d];
  }
  return offset;
}

}  // namespace tessera::detail
