// HostCompute, halo family: pack, unpack (write or add) and zero one rectangle of a
// field, row by row. The leading dims advance as an odometer, so the per-element cost is
// a plain strided copy (memcpy/memset runs for unit lon stride) with no divisions;
// halo_element_offset (tessera/detail/halo_rect.hpp) is the per-element form the CUDA
// kernels use, and both enumerate the elements in the same (leading..., row, col) order.

#include <algorithm>
#include <cstring>

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"

namespace tessera::detail {

namespace {

// Calls fn(offset, k) for each (leading index, row) of `rect` in `layout`, where offset is
// the element offset of that row's first column and k the row's first linear index.
template <class Fn>
void for_each_row(const StridedLayout& layout, const HaloRect& rect, Fn&& fn) {
  const int lat_dim = layout.ndim - 2;
  const std::int64_t lat_stride = layout.strides[lat_dim], lon_stride = layout.strides[lat_dim + 1];
  std::int64_t leading = 1;
  for (int d = 0; d < lat_dim; ++d) leading *= layout.shape[d];
  std::int64_t index[kMaxDims] = {};
  std::int64_t lead_offset = 0, k = 0;
  for (std::int64_t l = 0; l < leading; ++l) {
    for (std::int64_t r = 0; r < rect.rows; ++r) {
      fn(lead_offset + (rect.lat0 + r * rect.lat_step) * lat_stride + rect.lon0 * lon_stride, k);
      k += rect.cols;
    }
    for (int d = lat_dim - 1; d >= 0; --d) {  // next leading index, row-major
      if (++index[d] < layout.shape[d]) {
        lead_offset += layout.strides[d];
        break;
      }
      lead_offset -= (layout.shape[d] - 1) * layout.strides[d];
      index[d] = 0;
    }
  }
}

template <class T>
T add(T a, T b) {
  return a + b;
}
template <>
bfloat16 add(bfloat16 a, bfloat16 b) {
  return bfloat16(static_cast<float>(a) + static_cast<float>(b));
}

template <class T>
void pack_rect(const T* base, const StridedLayout& layout, const HaloRect& rect, T* out) {
  const std::int64_t step = layout.strides[layout.ndim - 1], cols = rect.cols;
  for_each_row(layout, rect, [&](std::int64_t off, std::int64_t k) {
    const T* src = base + off;
    if (step == 1) {
      std::memcpy(out + k, src, static_cast<std::size_t>(cols) * sizeof(T));
    } else {
      for (std::int64_t c = 0; c < cols; ++c) out[k + c] = src[c * step];
    }
  });
}

template <class T>
void unpack_rect(T* base, const StridedLayout& layout, const HaloRect& rect, const T* in, bool accumulate) {
  const std::int64_t step = layout.strides[layout.ndim - 1], cols = rect.cols;
  for_each_row(layout, rect, [&](std::int64_t off, std::int64_t k) {
    T* dst = base + off;
    if (!accumulate && step == 1) {
      std::memcpy(dst, in + k, static_cast<std::size_t>(cols) * sizeof(T));
    } else {
      for (std::int64_t c = 0; c < cols; ++c) {
        T& cell = dst[c * step];
        cell = accumulate ? add(cell, in[k + c]) : in[k + c];
      }
    }
  });
}

template <class T>
void zero_rect(T* base, const StridedLayout& layout, const HaloRect& rect) {
  const std::int64_t step = layout.strides[layout.ndim - 1], cols = rect.cols;
  for_each_row(layout, rect, [&](std::int64_t off, std::int64_t) {
    if (step == 1) {
      std::fill_n(base + off, cols, T{});
    } else {
      for (std::int64_t c = 0; c < cols; ++c) base[off + c * step] = T{};
    }
  });
}

template <class F>
void for_halo_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::bf16: f(bfloat16{}); break;
    case DType::i64: f(std::int64_t{}); break;
  }
}

}  // namespace

void HostCompute::halo_pack(DType dtype, const void* field, const StridedLayout& layout, const HaloRect& rect,
                            void* out, int) {
  for_halo_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    pack_rect(static_cast<const T*>(field), layout, rect, static_cast<T*>(out));
  });
}

void HostCompute::halo_unpack(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect,
                              const void* in, bool accumulate, int) {
  for_halo_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    unpack_rect(static_cast<T*>(field), layout, rect, static_cast<const T*>(in), accumulate);
  });
}

void HostCompute::halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, int) {
  for_halo_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    zero_rect(static_cast<T*>(field), layout, rect);
  });
}

}  // namespace tessera::detail
