// Linear as GEMMs over the flattened leading dims: y = x W^T + b.

#include <algorithm>

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn::functional {

using detail::fn_name;

namespace {

// Whether x is the bf16 copy of a bf16-mixed layer's input (its weight is f32).
bool is_rounded_input(const Tensor& x, const Tensor& weight, Precision precision) {
  return precision == Precision::bf16_mixed && x.defined() && x.dtype() == DType::bf16 &&
         weight.defined() && weight.dtype() == DType::f32;
}

// Checks x [..., in] against weight [out, in].
void check_linear_args(const Tensor& x, const Tensor& weight, Precision precision, const char* fn) {
  if (!is_rounded_input(x, weight, precision)) detail::require_float(x, fn, "input");
  detail::require_float(weight, fn, "weight");
  if (!is_rounded_input(x, weight, precision)) detail::require_same_dtype(x, "input", weight, "weight", fn);
  if (weight.dim() != 2) throw ShapeError(fn_name(fn) + ": weight " + weight.str() + " must be 2-D [out, in]");
  if (x.dim() < 1 || x.size(x.dim() - 1) != weight.size(1)) {
    throw ShapeError(fn_name(fn) + ": input " + x.str() + " must end in the weight's in-features " +
                     std::to_string(weight.size(1)) + " (weight " + weight.str() + ")");
  }
}

void check_bias_like(const Tensor& b, const char* role, const Tensor& weight, const char* fn) {
  detail::require_float(b, fn, role);
  detail::require_same_dtype(weight, "weight", b, role, fn);
  if (b.dim() != 1 || b.size(0) != weight.size(0)) {
    throw ShapeError(fn_name(fn) + ": " + role + " " + b.str() + " must be [" + std::to_string(weight.size(0)) +
                     "] to match weight " + weight.str());
  }
}

Shape with_last(const Shape& s, std::int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Precision precision) {
  const char* fn = "linear";
  check_linear_args(x, weight, precision, fn);
  if (bias.defined()) check_bias_like(bias, "bias", weight, fn);
  const std::int64_t in = weight.size(1), out = weight.size(0);
  const std::int64_t rows = shape_numel(with_last(x.shape(), 1));
  Tensor y = Tensor::empty(with_last(x.shape(), out), weight.dtype(), x.device());
  Tensor y2 = y.reshape({rows, out});
  if (in == 0) {
    // An empty contraction is zero; gemm would scale the uninitialised y by beta = 0
    // (NaN * 0 stays NaN).
    y2.fill_zero();
    if (bias.defined()) ops::add_bias(y2, bias, -1);
  } else if (bias.defined() && rows > 0) {
    // y = b in every row, then y += x W^T (beta = 1): the bias is written in the pass
    // BLAS would otherwise spend zeroing y for beta = 0, and no second pass adds it.
    // Rows are filled by doubling copies of the rows already filled.
    y2.narrow(0, 0, 1).copy_from(bias.reshape({1, out}));
    for (std::int64_t filled = 1; filled < rows; filled *= 2) {
      const std::int64_t n = std::min(filled, rows - filled);
      y2.narrow(0, filled, n).copy_from(y2.narrow(0, 0, n));
    }
    ops::gemm(x.reshape({rows, in}), false, weight, true, y2, 1.0, 1.0, precision);
  } else {
    ops::gemm(x.reshape({rows, in}), false, weight, true, y2, 1.0, 0.0, precision);
  }
  return y;
}

Tensor linear_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias, Precision precision) {
  const char* fn = "linear_backward";
  check_linear_args(x, weight, precision, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(weight, "weight", grad_y, "grad_y", fn);
  const std::int64_t in = weight.size(1), out = weight.size(0);
  if (grad_y.shape() != with_last(x.shape(), out)) {
    throw ShapeError(fn_name(fn) + ": grad_y " + grad_y.str() + " does not match the output of input " + x.str() +
                     " and weight " + weight.str());
  }
  if (grad_weight.defined()) {
    detail::require_float(grad_weight, fn, "grad_weight");
    detail::require_same_dtype(weight, "weight", grad_weight, "grad_weight", fn);
    detail::require_same_shape(weight, "weight", grad_weight, "grad_weight", fn);
  }
  if (grad_bias.defined()) check_bias_like(grad_bias, "grad_bias", weight, fn);

  const std::int64_t rows = shape_numel(with_last(x.shape(), 1));
  const Tensor dy2 = grad_y.reshape({rows, out});
  Tensor dx = Tensor::empty(x.shape(), weight.dtype(), x.device());
  if (in > 0) {
    Tensor dx2 = dx.reshape({rows, in});
    if (out == 0) dx2.fill_zero();
    else ops::gemm(dy2, false, weight, false, dx2, 1.0, 0.0, precision);
    // dW += dy^T x  (beta = 1 accumulates)
    if (grad_weight.defined() && rows > 0) {
      ops::gemm(dy2, true, x.reshape({rows, in}), false, grad_weight, 1.0, 1.0, precision);
    }
  }
  if (grad_bias.defined()) ops::accumulate_bias_grad(dy2, grad_bias, -1);
  return dx;
}

}  // namespace tessera::nn::functional
