// HostCompute, field family: the latitude-weighted squared error of the domain loss and
// the per-channel affine map of field normalisation, in double per element.

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

namespace {

template <class T>
double weighted_sum(const T* p, const T* t, const double* w, std::int64_t planes, std::int64_t rows,
                    std::int64_t cols, double grad_scale, T* g) {
  double sum = 0.0;
  for (std::int64_t b = 0; b < planes; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const std::int64_t k = (b * rows + i) * cols + j;
        const double diff = static_cast<double>(p[k]) - static_cast<double>(t[k]);
        sum += w[i] * diff * diff;
        g[k] = static_cast<T>(grad_scale * w[i] * diff);
      }
  return sum;
}

template <class T>
void affine(T* x, const double* scale, const double* shift, std::int64_t outer, std::int64_t channels,
            std::int64_t inner) {
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t c = 0; c < channels; ++c) {
      T* q = x + (o * channels + c) * inner;
      const double s = scale[c], t = shift[c];
      for (std::int64_t i = 0; i < inner; ++i) q[i] = static_cast<T>(q[i] * s + t);
    }
  }
}

}  // namespace

double HostCompute::weighted_squared_error(DType dtype, const void* prediction, const void* target,
                                           const double* row_weights, std::int64_t planes, std::int64_t rows,
                                           std::int64_t cols, double grad_scale, void* grad, int) {
  if (dtype == DType::f32) {
    return weighted_sum(static_cast<const float*>(prediction), static_cast<const float*>(target), row_weights, planes,
                        rows, cols, grad_scale, static_cast<float*>(grad));
  }
  return weighted_sum(static_cast<const double*>(prediction), static_cast<const double*>(target), row_weights, planes,
                      rows, cols, grad_scale, static_cast<double*>(grad));
}

void HostCompute::channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                                 std::int64_t channels, std::int64_t inner, int) {
  if (dtype == DType::f32) {
    affine(static_cast<float*>(x), scale, shift, outer, channels, inner);
  } else {
    affine(static_cast<double*>(x), scale, shift, outer, channels, inner);
  }
}

}  // namespace tessera::detail
