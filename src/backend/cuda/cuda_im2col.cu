// CudaCompute, convolution columns for one sample (host twin: host_im2col.cpp): im2col
// and the col2im adjoint, each output element computed by one thread from the index math
// of kernel_math.hpp (gathering in col2im, so no atomics).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"

namespace tessera::detail {
namespace {

template <class T>
__global__ void im2col_kernel(const T* x, T* cols, Im2colGeometry g) {
  TESSERA_GRID_STRIDE(e, g.c_in * g.kh * g.kw * g.oh * g.ow) {
    const std::int64_t src = im2col_source(e, g);
    cols[e] = src >= 0 ? x[src] : T(0);
  }
}

template <class T>
__global__ void col2im_add_kernel(const T* cols, T* dx, Im2colGeometry g) {
  TESSERA_GRID_STRIDE(e, g.c_in * g.h * g.w) {
    const std::int64_t ix = e % g.w, iy = (e / g.w) % g.h, c = e / (g.w * g.h);
    T acc = T(0);
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t entry = col2im_entry(c, iy, ix, i, j, g);
        if (entry >= 0) acc += cols[entry];
      }
    dx[e] += acc;
  }
}

}  // namespace

void CudaCompute::im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int device) {
  const std::int64_t count = g.c_in * g.kh * g.kw * g.oh * g.ow;
  if (count == 0) return;
  launch_typed(dtype, "im2col", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    im2col_kernel<T>
        <<<grid_for(count), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(cols), g);
  });
}

void CudaCompute::col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int device) {
  const std::int64_t count = g.c_in * g.h * g.w;
  if (count == 0) return;
  launch_typed(dtype, "col2im", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    col2im_add_kernel<T>
        <<<grid_for(count), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(cols), static_cast<T*>(dx), g);
  });
}

}  // namespace tessera::detail
