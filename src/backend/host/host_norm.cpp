// HostCompute, norm family: LayerNorm and RMSNorm over the last dim of x [rows, n], and
// their backwards. Row statistics are accumulated in double (two passes for the
// variance, so no cancellation) and saved for backward; eps sits inside the square root
// as in PyTorch. A null gamma / beta means the identity scale / zero shift; a null
// grad_gamma / grad_beta is skipped.

#include <cmath>
#include <vector>

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

void HostCompute::layer_norm(DType dtype, const void* x_, const void* gamma_, const void* beta_, double eps, void* y_,
                             void* mean_, void* rstd_, std::int64_t rows, std::int64_t n, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gamma_);
    const T* b = static_cast<const T*>(beta_);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = static_cast<const T*>(x_) + r * n;
      T* out = static_cast<T*>(y_) + r * n;
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) sum += in[i];
      const double mu = sum / static_cast<double>(n);
      double sq = 0;
      for (std::int64_t i = 0; i < n; ++i) sq += (in[i] - mu) * (in[i] - mu);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
      for (std::int64_t i = 0; i < n; ++i) {
        double v = (in[i] - mu) * inv;
        if (g) v *= g[i];
        if (b) v += b[i];
        out[i] = static_cast<T>(v);
      }
      static_cast<T*>(mean_)[r] = static_cast<T>(mu);
      static_cast<T*>(rstd_)[r] = static_cast<T>(inv);
    }
  });
}

void HostCompute::layer_norm_backward(DType dtype, const void* dy_, const void* x_, const void* gamma_,
                                      const void* mean_, const void* rstd_, void* dx_, void* grad_gamma_,
                                      void* grad_beta_, std::int64_t rows, std::int64_t n, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gm = static_cast<const T*>(gamma_);
    std::vector<double> dgamma(grad_gamma_ != nullptr ? n : 0, 0.0), dbeta(grad_beta_ != nullptr ? n : 0, 0.0);
    std::vector<double> xhat(n), g(n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = static_cast<const T*>(x_) + r * n;
      const T* dy = static_cast<const T*>(dy_) + r * n;
      T* out = static_cast<T*>(dx_) + r * n;
      const double mu = static_cast<const T*>(mean_)[r], inv = static_cast<const T*>(rstd_)[r];
      double sum_g = 0, sum_gx = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        xhat[i] = (in[i] - mu) * inv;
        g[i] = gm ? static_cast<double>(dy[i]) * gm[i] : static_cast<double>(dy[i]);
        sum_g += g[i];
        sum_gx += g[i] * xhat[i];
      }
      const double mean_g = sum_g / static_cast<double>(n), mean_gx = sum_gx / static_cast<double>(n);
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(inv * (g[i] - mean_g - xhat[i] * mean_gx));
      if (!dgamma.empty())
        for (std::int64_t i = 0; i < n; ++i) dgamma[i] += dy[i] * xhat[i];
      if (!dbeta.empty())
        for (std::int64_t i = 0; i < n; ++i) dbeta[i] += dy[i];
    }
    if (!dgamma.empty())
      for (std::int64_t i = 0; i < n; ++i) static_cast<T*>(grad_gamma_)[i] += static_cast<T>(dgamma[i]);
    if (!dbeta.empty())
      for (std::int64_t i = 0; i < n; ++i) static_cast<T*>(grad_beta_)[i] += static_cast<T>(dbeta[i]);
  });
}

void HostCompute::rms_norm(DType dtype, const void* x_, const void* gamma_, double eps, void* y_, void* rstd_,
                           std::int64_t rows, std::int64_t n, int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gamma_);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = static_cast<const T*>(x_) + r * n;
      T* out = static_cast<T*>(y_) + r * n;
      double sq = 0;
      for (std::int64_t i = 0; i < n; ++i) sq += static_cast<double>(in[i]) * in[i];
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(g ? in[i] * inv * g[i] : in[i] * inv);
      static_cast<T*>(rstd_)[r] = static_cast<T>(inv);
    }
  });
}

void HostCompute::rms_norm_backward(DType dtype, const void* dy_, const void* x_, const void* gamma_,
                                    const void* rstd_, void* dx_, void* grad_gamma_, std::int64_t rows, std::int64_t n,
                                    int) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gm = static_cast<const T*>(gamma_);
    std::vector<double> dgamma(grad_gamma_ != nullptr ? n : 0, 0.0);
    std::vector<double> xhat(n), g(n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = static_cast<const T*>(x_) + r * n;
      const T* dy = static_cast<const T*>(dy_) + r * n;
      T* out = static_cast<T*>(dx_) + r * n;
      const double inv = static_cast<const T*>(rstd_)[r];
      double sum_gx = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        xhat[i] = in[i] * inv;
        g[i] = gm ? static_cast<double>(dy[i]) * gm[i] : static_cast<double>(dy[i]);
        sum_gx += g[i] * xhat[i];
      }
      const double mean_gx = sum_gx / static_cast<double>(n);
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(inv * (g[i] - xhat[i] * mean_gx));
      if (!dgamma.empty())
        for (std::int64_t i = 0; i < n; ++i) dgamma[i] += dy[i] * xhat[i];
    }
    if (!dgamma.empty())
      for (std::int64_t i = 0; i < n; ++i) static_cast<T*>(grad_gamma_)[i] += static_cast<T>(dgamma[i]);
  });
}

}  // namespace tessera::detail
