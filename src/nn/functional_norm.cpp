// LayerNorm and RMSNorm over the last dim. Row statistics are accumulated in double
// (two passes for the variance, so no cancellation) and saved for backward; eps sits
// inside the square root as in PyTorch. An undefined gamma / beta means the identity
// scale / zero shift (affine = false); an undefined grad_gamma / grad_beta is skipped.

#include <cmath>

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

// What both backward passes check first: input x [..., n], grad_y of x's dtype and
// shape, gamma and grad_gamma [n] where defined. Returns n.
std::int64_t check_backward_inputs(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                                   const Tensor& grad_gamma, const char* fn) {
  const std::int64_t n = check_norm_input(x, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  detail::require_same_shape(x, "input", grad_y, "grad_y", fn);
  check_vector(gamma, "gamma", x, n, fn);
  check_vector(grad_gamma, "grad_gamma", x, n, fn);
  return n;
}

// Untyped, for the compute entries (dtypes are checked by then).
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
  detail::compute_for(x, fn).layer_norm(x.dtype(), x.data(), data_or_null(gamma), data_or_null(beta), eps,
                                        y.data(), mean.data(), rstd.data(), rows, n, x.device().index);
  return y;
}

// With xhat = (x - mean) rstd and g = dy * gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dgamma = sum_rows dy xhat,  dbeta = sum_rows dy.
Tensor layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, Tensor& grad_gamma, Tensor& grad_beta) {
  const char* fn = "layer_norm_backward";
  const std::int64_t n = check_backward_inputs(grad_y, x, gamma, grad_gamma, fn);
  check_vector(grad_beta, "grad_beta", x, n, fn);
  const std::int64_t rows = x.numel() / n;
  check_stat(mean, "mean", x, rows, fn);
  check_stat(rstd, "rstd", x, rows, fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::compute_for(x, fn).layer_norm_backward(x.dtype(), grad_y.data(), x.data(), data_or_null(gamma),
                                                 mean.data(), rstd.data(), dx.data(), data_or_null(grad_gamma),
                                                 data_or_null(grad_beta), rows, n, x.device().index);
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
  detail::compute_for(x, fn).rms_norm(x.dtype(), x.data(), data_or_null(gamma), eps, y.data(), rstd.data(), rows,
                                      n, x.device().index);
  return y;
}

// With xhat = x rstd and g = dy * gamma:  dx = rstd (g - xhat mean(g xhat)),  dgamma = sum_rows dy xhat.
Tensor rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                         Tensor& grad_gamma) {
  const char* fn = "rms_norm_backward";
  const std::int64_t n = check_backward_inputs(grad_y, x, gamma, grad_gamma, fn);
  const std::int64_t rows = x.numel() / n;
  check_stat(rstd, "rstd", x, rows, fn);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::compute_for(x, fn).rms_norm_backward(x.dtype(), grad_y.data(), x.data(), data_or_null(gamma),
                                               rstd.data(), dx.data(), data_or_null(grad_gamma), rows, n,
                                               x.device().index);
  return dx;
}

}  // namespace tessera::nn::functional
