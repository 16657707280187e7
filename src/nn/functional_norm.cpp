// LayerNorm and RMSNorm over the last dim. Row statistics are accumulated in double
// (two passes for the variance, so no cancellation) and saved for backward; eps sits
// inside the square root as in PyTorch. An undefined gamma / beta means the identity
// scale / zero shift (affine = false); an undefined grad_gamma / grad_beta is skipped.

#include <cmath>
#include <vector>

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::nn::functional {

using detail::fn_name;

namespace {

// Checks x [..., n] (n >= 1); returns n.
std::int64_t check_norm_input(const Tensor& x, const char* fn) {
  detail::require_float(x, fn, "input");
  if (x.dim() < 1 || x.size(x.dim() - 1) < 1) {
    throw ShapeError(fn_name(fn) + ": input " + x.str() + " needs a non-empty last dim to normalise over");
  }
  return x.size(x.dim() - 1);
}

void check_vector(const Tensor& v, const char* role, const Tensor& x, std::int64_t n, const char* fn) {
  if (!v.defined()) return;
  detail::require_float(v, fn, role);
  detail::require_same_dtype(x, "input", v, role, fn);
  if (v.dim() != 1 || v.size(0) != n) {
    throw ShapeError(fn_name(fn) + ": " + role + " " + v.str() + " must be [" + std::to_string(n) +
                     "], the last dim of input " + x.str());
  }
}

void check_stat(const Tensor& s, const char* role, const Tensor& x, std::int64_t rows, const char* fn) {
  if (!s.defined()) {
    throw InvalidArgument(fn_name(fn) + ": saved statistic " + role + " is undefined (run the forward first)");
  }
  detail::require_float(s, fn, role);
  detail::require_same_dtype(x, "input", s, role, fn);
  if (s.dim() != 1 || s.size(0) != rows) {
    throw ShapeError(fn_name(fn) + ": saved statistic " + role + " " + s.str() + " must be [" +
                     std::to_string(rows) + "], one per row of input " + x.str());
  }
}

void check_eps(double eps, const char* fn) {
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    throw InvalidArgument(fn_name(fn) + ": eps " + std::to_string(eps) + " must be finite and >= 0");
  }
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
// Untyped, for the device entries (dtypes are checked by then).
void* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& mean, Tensor& rstd) {
  const char* fn = "layer_norm";
  const std::int64_t n = check_norm_input(x, fn);
  check_vector(gamma, "gamma", x, n, fn);
  check_vector(beta, "beta", x, n, fn);
  check_eps(eps, fn);
  const std::int64_t rows = x.numel() / n;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  mean = Tensor::empty({rows}, x.dtype(), x.device());
  rstd = Tensor::empty({rows}, x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).layer_norm(x.dtype(), x.data(), data_or_null(gamma), data_or_null(beta), eps,
                                          y.data(), mean.data(), rstd.data(), rows, n, x.device().index);
    return y;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = data_or_null<T>(gamma);
    const T* b = data_or_null<T>(beta);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * n;
      T* out = y.data<T>() + r * n;
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
      mean.data<T>()[r] = static_cast<T>(mu);
      rstd.data<T>()[r] = static_cast<T>(inv);
    }
  });
  return y;
}

// With xhat = (x - mean) rstd and g = dy * gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dgamma = sum_rows dy xhat,  dbeta = sum_rows dy.
Tensor layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, Tensor& grad_gamma, Tensor& grad_beta) {
  const char* fn = "layer_norm_backward";
  const std::int64_t n = check_norm_input(x, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  detail::require_same_shape(x, "input", grad_y, "grad_y", fn);
  check_vector(gamma, "gamma", x, n, fn);
  check_vector(grad_gamma, "grad_gamma", x, n, fn);
  check_vector(grad_beta, "grad_beta", x, n, fn);
  const std::int64_t rows = x.numel() / n;
  check_stat(mean, "mean", x, rows, fn);
  check_stat(rstd, "rstd", x, rows, fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).layer_norm_backward(x.dtype(), grad_y.data(), x.data(), data_or_null(gamma),
                                                   mean.data(), rstd.data(), dx.data(), data_or_null(grad_gamma),
                                                   data_or_null(grad_beta), rows, n, x.device().index);
    return dx;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gm = data_or_null<T>(gamma);
    std::vector<double> dgamma(grad_gamma.defined() ? n : 0, 0.0), dbeta(grad_beta.defined() ? n : 0, 0.0);
    std::vector<double> xhat(n), g(n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * n;
      const T* dy = grad_y.data<T>() + r * n;
      T* out = dx.data<T>() + r * n;
      const double mu = mean.data<T>()[r], inv = rstd.data<T>()[r];
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
      for (std::int64_t i = 0; i < n; ++i) grad_gamma.data<T>()[i] += static_cast<T>(dgamma[i]);
    if (!dbeta.empty())
      for (std::int64_t i = 0; i < n; ++i) grad_beta.data<T>()[i] += static_cast<T>(dbeta[i]);
  });
  return dx;
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps, Tensor& rstd) {
  const char* fn = "rms_norm";
  const std::int64_t n = check_norm_input(x, fn);
  check_vector(gamma, "gamma", x, n, fn);
  check_eps(eps, fn);
  const std::int64_t rows = x.numel() / n;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  rstd = Tensor::empty({rows}, x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).rms_norm(x.dtype(), x.data(), data_or_null(gamma), eps, y.data(), rstd.data(), rows,
                                        n, x.device().index);
    return y;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = data_or_null<T>(gamma);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * n;
      T* out = y.data<T>() + r * n;
      double sq = 0;
      for (std::int64_t i = 0; i < n; ++i) sq += static_cast<double>(in[i]) * in[i];
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(g ? in[i] * inv * g[i] : in[i] * inv);
      rstd.data<T>()[r] = static_cast<T>(inv);
    }
  });
  return y;
}

// With xhat = x rstd and g = dy * gamma:  dx = rstd (g - xhat mean(g xhat)),  dgamma = sum_rows dy xhat.
Tensor rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                         Tensor& grad_gamma) {
  const char* fn = "rms_norm_backward";
  const std::int64_t n = check_norm_input(x, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  detail::require_same_shape(x, "input", grad_y, "grad_y", fn);
  check_vector(gamma, "gamma", x, n, fn);
  check_vector(grad_gamma, "grad_gamma", x, n, fn);
  const std::int64_t rows = x.numel() / n;
  check_stat(rstd, "rstd", x, rows, fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (detail::on_cuda(x)) {
    detail::compute_for(x, fn).rms_norm_backward(x.dtype(), grad_y.data(), x.data(), data_or_null(gamma),
                                                 rstd.data(), dx.data(), data_or_null(grad_gamma), rows, n,
                                                 x.device().index);
    return dx;
  }
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gm = data_or_null<T>(gamma);
    std::vector<double> dgamma(grad_gamma.defined() ? n : 0, 0.0);
    std::vector<double> xhat(n), g(n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * n;
      const T* dy = grad_y.data<T>() + r * n;
      T* out = dx.data<T>() + r * n;
      const double inv = rstd.data<T>()[r];
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
      for (std::int64_t i = 0; i < n; ++i) grad_gamma.data<T>()[i] += static_cast<T>(dgamma[i]);
  });
  return dx;
}

}  // namespace tessera::nn::functional
