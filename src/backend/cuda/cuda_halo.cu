// CudaCompute, halo packing (host twin: host_halo.cpp): the elements of a halo rectangle
// over every leading index, gathered into or scattered from a contiguous message, or
// zeroed. Packing and zeroing move raw words of the element's width; the adjoint's
// accumulation adds in the dtype as the host does.

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

template <class T>
__global__ void halo_unpack_kernel(T* field, StridedLayout layout, HaloRect rect, const T* in, bool accumulate,
                                   std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    T& dst = field[halo_element_offset(e, layout, rect)];
    dst = accumulate ? static_cast<T>(static_cast<float>(dst) + static_cast<float>(in[e])) : in[e];
  }
}
template <>
__global__ void halo_unpack_kernel<double>(double* field, StridedLayout layout, HaloRect rect, const double* in,
                                           bool accumulate, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    double& dst = field[halo_element_offset(e, layout, rect)];
    dst = accumulate ? dst + in[e] : in[e];
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
  const unsigned grid = grid_for(count);
  switch (dtype) {
    case DType::f32:
      halo_unpack_kernel<float><<<grid, kThreadsPerBlock, 0, s>>>(
          static_cast<float*>(field), layout, rect, static_cast<const float*>(in), accumulate, count);
      break;
    case DType::f64:
      halo_unpack_kernel<double><<<grid, kThreadsPerBlock, 0, s>>>(
          static_cast<double*>(field), layout, rect, static_cast<const double*>(in), accumulate, count);
      break;
    case DType::bf16:
      halo_unpack_kernel<bfloat16><<<grid, kThreadsPerBlock, 0, s>>>(
          static_cast<bfloat16*>(field), layout, rect, static_cast<const bfloat16*>(in), accumulate, count);
      break;
    default: throw ShapeError("cuda halo_unpack: dtype must be f32, f64 or bf16");
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
