#pragma once
// The math of every layer as free functions: the serial modules (nn/) and the
// tensor-parallel modules (tp/) both call these, so a parallel layer computes exactly
// what its serial twin computes on its shard.
//
// Conventions: inputs are contiguous f32 or f64 tensors (ids are i64) on one device;
// backward functions *accumulate* into parameter gradients (+=) and return the input
// gradient. An undefined `bias` / `grad_bias` means "no bias".

#include <cstdint>

#include "tessera/tensor.hpp"

namespace tessera::nn::functional {

// ---- Linear: x [..., in], weight [out, in], bias [out] -> y [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linear_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias);

// ---- Conv2d, NCHW, groups = 1: x [N, C_in, H, W], weight [C_out, C_in, kh, kw], bias [C_out]
struct Conv2dOptions {
  int stride_h = 1, stride_w = 1;
  int padding_h = 0, padding_w = 0;  // zero padding
  int dilation_h = 1, dilation_w = 1;
  bool is_default() const {
    return stride_h == 1 && stride_w == 1 && padding_h == 0 && padding_w == 0 && dilation_h == 1 &&
           dilation_w == 1;
  }
};
// Output extent along one axis.
std::int64_t conv_output_size(std::int64_t input, int kernel, int stride, int padding, int dilation);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);
Tensor conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias, const Conv2dOptions& options);

// ---- Embedding: ids i64 [...], weight [rows, dim] holding global rows
// [row_offset, row_offset + rows) -> y [..., dim]. Ids outside that range give zero rows
// (the vocab-parallel mask); on a full table (row_offset 0) an id outside [0, rows) is an
// InvalidArgument naming the id.
Tensor embedding(const Tensor& ids, const Tensor& weight, std::int64_t row_offset = 0, bool mask_out_of_range = false);
void embedding_backward(const Tensor& grad_y, const Tensor& ids, Tensor& grad_weight, std::int64_t row_offset = 0);

// ---- Activations (GELU is the exact erf form, PyTorch's default)
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& grad_y, const Tensor& x);
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& grad_y, const Tensor& x);

// ---- Norms over the last dim: x [..., n], gamma/beta [n].
// `mean` / `rstd` receive per-row statistics ([rows]) for the backward pass.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& mean, Tensor& rstd);
Tensor layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, Tensor& grad_gamma, Tensor& grad_beta);
Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps, Tensor& rstd);
Tensor rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                         Tensor& grad_gamma);

}  // namespace tessera::nn::functional
