// CudaCompute, halo packing (host twin: host_halo.cpp): the elements of a halo rectangle
// over every leading index, gathered into or scattered from a contiguous message, or
// zeroed. Packing and zeroing move raw words of the element's width; the adjoint's
// accumulation adds in the dtype as the host does (i64 fields too: integer masks and
// indices travel through the same exchange).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/halo_rect.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

template <class Word>
__global__ void halo_pack_kernel(const Word* field, StridedLayout layout, HaloRect rect, Word* out,
                                 std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) { out[e] = field[halo_element_offset(e, layout, rect)]; }
}

template <class Word>
__global__ void halo_zero_kernel(Word* field, StridedLayout layout, HaloRect rect, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) { field[halo_element_offset(e, layout, rect)] = Word(0); }
}

// One addition in the element's own precision, as the host's unpack does (bf16 through
// f32, rounded back after every addition).
template <class T>
__device__ T add_cell(T a, T b) {
  return a + b;
}
template <>
__device__ bfloat16 add_cell<bfloat16>(bfloat16 a, bfloat16 b) {
  return static_cast<bfloat16>(static_cast<float>(a) + static_cast<float>(b));
}

template <class T>
__global__ void halo_unpack_kernel(T* field, StridedLayout layout, HaloRect rect, const T* in, bool accumulate,
                                   std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    T& dst = field[halo_element_offset(e, layout, rect)];
    dst = accumulate ? add_cell(dst, in[e]) : in[e];
  }
}

// The adjoint of a replicated edge row (lat_step 0): every row of the rectangle is the same
// field row, so one thread per cell adds the rows' values in row order (the host's
// order, hence its bits). One thread per element would race on the shared cells: that
// lost additions on the first GPU run.
template <class T>
__global__ void halo_accumulate_repeated_row_kernel(T* field, StridedLayout layout, HaloRect rect, const T* in,
                                                    std::int64_t cells) {
  HaloRect row = rect;
  row.rows = 1;
  TESSERA_GRID_STRIDE(e, cells) {
    const std::int64_t col = e % rect.cols, lead = e / rect.cols;
    T& dst = field[halo_element_offset(e, layout, row)];
    T sum = dst;
    for (std::int64_t r = 0; r < rect.rows; ++r) sum = add_cell(sum, in[(lead * rect.rows + r) * rect.cols + col]);
    dst = sum;
  }
}

template <class T>
void launch_unpack(T* field, const StridedLayout& layout, const HaloRect& rect, const T* in, bool accumulate,
                   std::int64_t count, cudaStream_t s) {
  if (accumulate && rect.lat_step == 0 && rect.rows > 1) {
    const std::int64_t cells = count / rect.rows;
    halo_accumulate_repeated_row_kernel<T><<<grid_for(cells), kThreadsPerBlock, 0, s>>>(field, layout, rect, in, cells);
  } else {
    halo_unpack_kernel<T><<<grid_for(count), kThreadsPerBlock, 0, s>>>(field, layout, rect, in, accumulate, count);
  }
}

// Calls f(Word{}) with the unsigned word as wide as one element of `dtype`: packing and
// zeroing move bits, whatever the element type.
template <class F>
void word_dispatch(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    default: f(std::uint64_t{}); break;
  }
}

std::int64_t halo_count(const StridedLayout& layout, const HaloRect& rect) {
  std::int64_t count = halo_rect_area(rect);
  for (int d = 0; d < layout.ndim - 2; ++d) count *= layout.shape[d];
  return count;
}

}  // namespace

void CudaCompute::halo_pack(DType dtype, const void* field, const StridedLayout& layout, const HaloRect& rect,
                            void* out, int device) {
  const std::int64_t count = halo_count(layout, rect);
  if (count == 0) return;
  DeviceGuard guard(device);
  word_dispatch(dtype, [&](auto word) {
    using Word = decltype(word);
    halo_pack_kernel<Word><<<grid_for(count), kThreadsPerBlock, 0, compute_stream(guard.device())>>>(
        static_cast<const Word*>(field), layout, rect, static_cast<Word*>(out), count);
  });
  TESSERA_CHECK_LAUNCH();
}

void CudaCompute::halo_unpack(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect,
                              const void* in, bool accumulate, int device) {
  const std::int64_t count = halo_count(layout, rect);
  if (count == 0) return;
  DeviceGuard guard(device);
  cudaStream_t s = compute_stream(guard.device());
  switch (dtype) {
    case DType::f32:
      launch_unpack(static_cast<float*>(field), layout, rect, static_cast<const float*>(in), accumulate, count, s);
      break;
    case DType::f64:
      launch_unpack(static_cast<double*>(field), layout, rect, static_cast<const double*>(in), accumulate, count, s);
      break;
    case DType::bf16:
      launch_unpack(static_cast<bfloat16*>(field), layout, rect, static_cast<const bfloat16*>(in), accumulate, count,
                    s);
      break;
    case DType::i64:
      launch_unpack(static_cast<std::int64_t*>(field), layout, rect, static_cast<const std::int64_t*>(in), accumulate,
                    count, s);
      break;
  }
  TESSERA_CHECK_LAUNCH();
}

void CudaCompute::halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect,
                            int device) {
  const std::int64_t count = halo_count(layout, rect);
  if (count == 0) return;
  DeviceGuard guard(device);
  word_dispatch(dtype, [&](auto word) {
    using Word = decltype(word);
    halo_zero_kernel<Word><<<grid_for(count), kThreadsPerBlock, 0, compute_stream(guard.device())>>>(
        static_cast<Word*>(field), layout, rect, count);
  });
  TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera::detail
