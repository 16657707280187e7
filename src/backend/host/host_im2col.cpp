// HostCompute, convolution family: im2col and its adjoint col2im for one sample
// [C_in, H, W], row by row (the CUDA kernels walk the same index math element by
// element, src/backend/kernel_math.hpp).

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

namespace {

// cols[(c, i, j), (oy, ox)] = x[c, oy*sh - ph + i*dh, ox*sw - pw + j*dw] (0 outside).
template <class T>
void im2col_typed(const T* x, T* cols, const Im2colGeometry& g) {
  for (std::int64_t c = 0; c < g.c_in; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * (g.oh * g.ow);
        const T* plane = x + c * g.h * g.w;
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          T* out = row + oy * g.ow;
          if (iy < 0 || iy >= g.h) {
            for (std::int64_t ox = 0; ox < g.ow; ++ox) out[ox] = T(0);
            continue;
          }
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const std::int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
            out[ox] = (ix >= 0 && ix < g.w) ? plane[iy * g.w + ix] : T(0);
          }
        }
      }
}

// The adjoint of im2col: dx[c, iy, ix] += dcols[(c, i, j), (oy, ox)] over every window
// that read (iy, ix); adds into dx.
template <class T>
void col2im_typed(const T* cols, T* dx, const Im2colGeometry& g) {
  for (std::int64_t c = 0; c < g.c_in; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * (g.oh * g.ow);
        T* plane = dx + c * g.h * g.w;
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          if (iy < 0 || iy >= g.h) continue;
          const T* in = row + oy * g.ow;
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const std::int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
            if (ix >= 0 && ix < g.w) plane[iy * g.w + ix] += in[ox];
          }
        }
      }
}

}  // namespace

void HostCompute::im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int) {
  if (dtype == DType::f32) {
    im2col_typed(static_cast<const float*>(x), static_cast<float*>(cols), g);
  } else {
    im2col_typed(static_cast<const double*>(x), static_cast<double*>(cols), g);
  }
}

void HostCompute::col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int) {
  if (dtype == DType::f32) {
    col2im_typed(static_cast<const float*>(cols), static_cast<float*>(dx), g);
  } else {
    col2im_typed(static_cast<const double*>(cols), static_cast<double*>(dx), g);
  }
}

}  // namespace tessera::detail
