// Conv2d (NCHW, groups = 1) as im2col + GEMM per sample:
//   cols [C_in*kh*kw, OH*OW] gathers the receptive field of every output pixel, so
//   y_n = W [C_out, C_in*kh*kw] * cols, and backward is two more GEMMs plus col2im (the
//   adjoint of im2col, which adds overlapping windows back into dx).
// A default-option 1x1 convolution needs no im2col: x_n itself is the column matrix,
// which is the case the tensor-parallel 1x1 convolutions hit.

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn::functional {

using detail::fn_name;

std::int64_t conv_output_size(std::int64_t input, int kernel, int stride, int padding, int dilation) {
  if (input < 0 || kernel < 1 || stride < 1 || padding < 0 || dilation < 1) {
    throw InvalidArgument("nn::functional::conv_output_size: invalid input " + std::to_string(input) + ", kernel " +
                          std::to_string(kernel) + ", stride " + std::to_string(stride) + ", padding " +
                          std::to_string(padding) + " or dilation " + std::to_string(dilation) +
                          " (need input >= 0, kernel/stride/dilation >= 1, padding >= 0)");
  }
  const std::int64_t span = static_cast<std::int64_t>(dilation) * (kernel - 1) + 1;
  const std::int64_t padded = input + 2 * static_cast<std::int64_t>(padding);
  if (padded < span) {
    throw ShapeError("nn::functional::conv_output_size: input extent " + std::to_string(input) + " with padding " +
                     std::to_string(padding) + " is smaller than the dilated kernel extent " +
                     std::to_string(span) + " (kernel " + std::to_string(kernel) + ", dilation " +
                     std::to_string(dilation) + ")");
  }
  return (padded - span) / stride + 1;
}

namespace {

struct ConvGeometry {
  std::int64_t n, c_in, h, w, c_out, kh, kw, oh, ow;
  std::int64_t col_rows() const { return c_in * kh * kw; }
  std::int64_t col_cols() const { return oh * ow; }
};

ConvGeometry check_conv_args(const Tensor& x, const Tensor& weight, const Conv2dOptions& o, const char* fn) {
  detail::require_float(x, fn, "input");
  detail::require_float(weight, fn, "weight");
  detail::require_same_dtype(x, "input", weight, "weight", fn);
  if (weight.dim() != 4) {
    throw ShapeError(fn_name(fn) + ": weight " + weight.str() + " must be 4-D [C_out, C_in, kh, kw]");
  }
  if (x.dim() != 4 || x.size(1) != weight.size(1)) {
    throw ShapeError(fn_name(fn) + ": input " + x.str() + " must be [N, " + std::to_string(weight.size(1)) +
                     ", H, W] to match weight " + weight.str());
  }
  if (o.stride_h < 1 || o.stride_w < 1 || o.padding_h < 0 || o.padding_w < 0 || o.dilation_h < 1 ||
      o.dilation_w < 1) {
    throw InvalidArgument(fn_name(fn) + ": invalid options stride " + std::to_string(o.stride_h) + "x" +
                          std::to_string(o.stride_w) + ", padding " + std::to_string(o.padding_h) + "x" +
                          std::to_string(o.padding_w) + ", dilation " + std::to_string(o.dilation_h) + "x" +
                          std::to_string(o.dilation_w));
  }
  if (weight.size(2) < 1 || weight.size(3) < 1) {
    throw ShapeError(fn_name(fn) + ": weight " + weight.str() + " has an empty kernel");
  }
  ConvGeometry g{};
  g.n = x.size(0);
  g.c_in = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  g.c_out = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  try {
    g.oh = conv_output_size(g.h, static_cast<int>(g.kh), o.stride_h, o.padding_h, o.dilation_h);
    g.ow = conv_output_size(g.w, static_cast<int>(g.kw), o.stride_w, o.padding_w, o.dilation_w);
  } catch (const ShapeError& e) {
    throw ShapeError(fn_name(fn) + ": input " + x.str() + " is too small for weight " + weight.str() + ": " +
                     e.what());
  }
  return g;
}

bool is_pointwise(const ConvGeometry& g, const Conv2dOptions& o) { return g.kh == 1 && g.kw == 1 && o.is_default(); }

tessera::detail::Im2colGeometry im2col_geometry(const ConvGeometry& g, const Conv2dOptions& o) {
  tessera::detail::Im2colGeometry d;
  d.c_in = g.c_in;
  d.h = g.h;
  d.w = g.w;
  d.kh = g.kh;
  d.kw = g.kw;
  d.oh = g.oh;
  d.ow = g.ow;
  d.stride_h = o.stride_h;
  d.stride_w = o.stride_w;
  d.pad_h = o.padding_h;
  d.pad_w = o.padding_w;
  d.dil_h = o.dilation_h;
  d.dil_w = o.dilation_w;
  return d;
}

// Sample n of a contiguous NCHW tensor as a 2-D [channels, pixels] view.
Tensor gemm_weight(const Tensor& w2, Precision precision) {
  return precision == Precision::bf16_mixed && w2.dtype() == DType::f32 ? ops::cast(w2, DType::bf16) : w2;
}

Tensor sample_matrix(const Tensor& t, std::int64_t n) {
  return t.narrow(0, n, 1).reshape({t.size(1), t.size(2) * t.size(3)});
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options,
              Precision precision) {
  const char* fn = "conv2d";
  const ConvGeometry g = check_conv_args(x, weight, options, fn);
  if (bias.defined()) {
    detail::require_float(bias, fn, "bias");
    detail::require_same_dtype(weight, "weight", bias, "bias", fn);
    if (bias.dim() != 1 || bias.size(0) != g.c_out) {
      throw ShapeError(fn_name(fn) + ": bias " + bias.str() + " must be [" + std::to_string(g.c_out) +
                       "] to match weight " + weight.str());
    }
  }
  // Every sample of y is written by a GEMM with beta = 0: no zero fill first (unless the
  // contraction is empty, where gemm would only scale the uninitialised y by 0).
  Tensor y = g.col_rows() > 0 ? Tensor::empty({g.n, g.c_out, g.oh, g.ow}, x.dtype(), x.device())
                              : Tensor::zeros({g.n, g.c_out, g.oh, g.ow}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  // bf16-mixed: the weight rounded once for every sample's GEMM, not once per sample.
  const Tensor w2 = gemm_weight(weight.reshape({g.c_out, g.col_rows()}), precision);
  const bool pointwise = is_pointwise(g, options);
  Tensor cols = pointwise ? Tensor() : Tensor::empty({g.col_rows(), g.col_cols()}, x.dtype(), x.device());
  for (std::int64_t n = 0; n < g.n; ++n) {
    Tensor y_n = sample_matrix(y, n);
    if (pointwise) {
      ops::gemm(w2, false, sample_matrix(x, n), false, y_n, 1.0, 0.0, precision);
      continue;
    }
    detail::compute_for(x, fn).im2col(x.dtype(), x.narrow(0, n, 1).data(), cols.data(), im2col_geometry(g, options),
                                      x.device().index);
    ops::gemm(w2, false, cols, false, y_n, 1.0, 0.0, precision);
  }
  if (bias.defined()) ops::add_bias(y, bias, 1);
  return y;
}

Tensor conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias, const Conv2dOptions& options, Precision precision) {
  const char* fn = "conv2d_backward";
  const ConvGeometry g = check_conv_args(x, weight, options, fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(x, "input", grad_y, "grad_y", fn);
  if (grad_y.shape() != Shape{g.n, g.c_out, g.oh, g.ow}) {
    throw ShapeError(fn_name(fn) + ": grad_y " + grad_y.str() + " does not match the output " +
                     shape_str({g.n, g.c_out, g.oh, g.ow}) + " of input " + x.str() + " and weight " + weight.str());
  }
  if (grad_weight.defined()) {
    detail::require_float(grad_weight, fn, "grad_weight");
    detail::require_same_dtype(weight, "weight", grad_weight, "grad_weight", fn);
    detail::require_same_shape(weight, "weight", grad_weight, "grad_weight", fn);
  }
  if (grad_bias.defined()) {
    detail::require_float(grad_bias, fn, "grad_bias");
    detail::require_same_dtype(weight, "weight", grad_bias, "grad_bias", fn);
    if (grad_bias.dim() != 1 || grad_bias.size(0) != g.c_out) {
      throw ShapeError(fn_name(fn) + ": grad_bias " + grad_bias.str() + " must be [" + std::to_string(g.c_out) +
                       "] to match weight " + weight.str());
    }
  }

  if (grad_y.numel() == 0 || x.numel() == 0) {
    if (grad_bias.defined()) ops::accumulate_bias_grad(grad_y, grad_bias, 1);
    return Tensor::zeros(x.shape(), x.dtype(), x.device());
  }
  // bf16-mixed: the weight rounded once for every sample's GEMM, not once per sample.
  const Tensor w2 = gemm_weight(weight.reshape({g.c_out, g.col_rows()}), precision);
  Tensor gw2 = grad_weight.defined() ? grad_weight.reshape({g.c_out, g.col_rows()}) : Tensor();
  const bool pointwise = is_pointwise(g, options);
  // Pointwise, every sample of dx is written by a GEMM with beta = 0 (its contraction over
  // c_out > 0 channels is not empty): no zero fill first. Otherwise col2im adds into it.
  Tensor dx = pointwise ? Tensor::empty(x.shape(), x.dtype(), x.device())
                        : Tensor::zeros(x.shape(), x.dtype(), x.device());
  Tensor cols = pointwise ? Tensor() : Tensor::empty({g.col_rows(), g.col_cols()}, x.dtype(), x.device());
  Tensor dcols = pointwise ? Tensor() : Tensor::empty({g.col_rows(), g.col_cols()}, x.dtype(), x.device());
  for (std::int64_t n = 0; n < g.n; ++n) {
    const Tensor dy_n = sample_matrix(grad_y, n);
    if (pointwise) {
      Tensor dx_n = sample_matrix(dx, n);
      ops::gemm(w2, true, dy_n, false, dx_n, 1.0, 0.0, precision);
      if (gw2.defined()) ops::gemm(dy_n, false, sample_matrix(x, n), true, gw2, 1.0, 1.0, precision);
      continue;
    }
    ops::gemm(w2, true, dy_n, false, dcols, 1.0, 0.0, precision);
    auto& compute = detail::compute_for(x, fn);
    const auto geometry = im2col_geometry(g, options);
    compute.col2im_add(x.dtype(), dcols.data(), dx.narrow(0, n, 1).data(), geometry, x.device().index);
    if (gw2.defined()) compute.im2col(x.dtype(), x.narrow(0, n, 1).data(), cols.data(), geometry, x.device().index);
    // dW += dy_n cols^T  (beta = 1 accumulates over samples and calls)
    if (gw2.defined()) ops::gemm(dy_n, false, cols, true, gw2, 1.0, 1.0, precision);
  }
  if (grad_bias.defined()) ops::accumulate_bias_grad(grad_y, grad_bias, 1);
  return dx;
}

}  // namespace tessera::nn::functional
