// HostCompute, halo family: pack, unpack (write or add) and zero one rectangle of a
// field, row by row, or as one run when its rows are adjacent in memory. The leading dims
// advance as an odometer, so the per-element cost is a plain strided copy (memcpy/memset
// runs for unit lon stride, a vectorised loop for the adjoint's additions) with no divisions;
// halo_element_offset (tessera/detail/halo_rect.hpp) is the per-element form the CUDA
// kernels use, and both enumerate the elements in the same (leading..., row, col) order.

#include <algorithm>
#include <cstring>

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"

namespace tessera::detail {

namespace {

// Calls fn(offset, k, length) for each contiguous run of `rect` in `layout`: a row of the
// rect per (leading index, row), or all its rows at once when they follow each other in
// memory (unit lon stride, rows spanning the whole padded longitude, lat_step 1: the
// latitude halos). offset is the element offset of the run's first cell, k its first
// linear index in the rect's (leading..., row, col) order, length its cell count.
template <class Fn>
void for_each_run(const StridedLayout& layout, const HaloRect& rect, Fn&& fn) {
  const int lat_dim = layout.ndim - 2;
  const std::int64_t lat_stride = layout.strides[lat_dim], lon_stride = layout.strides[lat_dim + 1];
  std::int64_t leading = 1;
  for (int d = 0; d < lat_dim; ++d) leading *= layout.shape[d];
  const bool rows_contiguous = lon_stride == 1 && rect.lat_step == 1 && lat_stride == rect.cols;
  const std::int64_t runs = rows_contiguous ? 1 : rect.rows;
  const std::int64_t length = rows_contiguous ? rect.rows * rect.cols : rect.cols;
  std::int64_t index[kMaxDims] = {};
  std::int64_t lead_offset = 0, k = 0;
  for (std::int64_t l = 0; l < leading; ++l) {
    for (std::int64_t r = 0; r < runs; ++r) {
      fn(lead_offset + (rect.lat0 + r * rect.lat_step) * lat_stride + rect.lon0 * lon_stride, k, length);
      k += length;
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
  const std::int64_t step = layout.strides[layout.ndim - 1];
  for_each_run(layout, rect, [&](std::int64_t off, std::int64_t k, std::int64_t n) {
    const T* src = base + off;
    if (step == 1) {
      std::memcpy(out + k, src, static_cast<std::size_t>(n) * sizeof(T));
    } else {
      for (std::int64_t c = 0; c < n; ++c) out[k + c] = src[c * step];
    }
  });
}

template <class T>
void unpack_rect(T* base, const StridedLayout& layout, const HaloRect& rect, const T* in, bool accumulate) {
  const std::int64_t step = layout.strides[layout.ndim - 1];
  for_each_run(layout, rect, [&](std::int64_t off, std::int64_t k, std::int64_t n) {
    T* dst = base + off;
    if (!accumulate && step == 1) {
      std::memcpy(dst, in + k, static_cast<std::size_t>(n) * sizeof(T));
    } else if (step == 1) {
      for (std::int64_t c = 0; c < n; ++c) dst[c] = add(dst[c], in[k + c]);  // vectorises
    } else {
      for (std::int64_t c = 0; c < n; ++c) {
        T& cell = dst[c * step];
        cell = accumulate ? add(cell, in[k + c]) : in[k + c];
      }
    }
  });
}

template <class T>
void zero_rect(T* base, const StridedLayout& layout, const HaloRect& rect) {
  const std::int64_t step = layout.strides[layout.ndim - 1];
  for_each_run(layout, rect, [&](std::int64_t off, std::int64_t, std::int64_t n) {
    if (step == 1) {
      std::fill_n(base + off, n, T{});
    } else {
      for (std::int64_t c = 0; c < n; ++c) base[off + c * step] = T{};
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
