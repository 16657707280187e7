#pragma once
// The math of every layer as free functions: the serial modules (nn/) and the
// tensor-parallel modules (tp/) both call these, so a parallel layer computes exactly
// what its serial twin computes on its shard.
//
// Conventions: inputs are contiguous f32 or f64 host tensors (ids are i64) of one
// dtype; backward functions *accumulate* into parameter gradients (+=) and return the
// input gradient. An undefined `bias` means "no bias". An undefined gradient output
// (`grad_weight`, `grad_bias`, `grad_gamma`, `grad_beta`) is skipped: that gradient is
// not computed. The tensor-parallel layers rely on this (the row-parallel layers add
// their replicated bias's gradient themselves, after the reduction).
//
// These functions hold no state. The caching rule (one backward per forward) belongs
// to the modules; see nn/module.hpp.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tessera/precision.hpp"
#include "tessera/tensor.hpp"

namespace tessera::nn::functional {

// ---- Linear: x [..., in], weight [out, in], bias [out] -> y [..., out]
// linear_backward returns dx [..., in]; it adds dy^T x into grad_weight [out, in] and
// the sum of dy over all but the last dim into grad_bias [out]. Either may be undefined
// to skip it.
// `precision` (tessera/precision.hpp) is that of the GEMMs. bf16_mixed: the weight, bias
// and gradients are f32 and so are y and dx; x is f32 or already bf16 (a caller that
// keeps its own bf16 copy of the input for backward passes it as it is).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Precision precision = Precision::fp32);
Tensor linear_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias, Precision precision = Precision::fp32);

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
// Output extent along one axis: (input + 2*padding - dilation*(kernel - 1) - 1) / stride + 1.
std::int64_t conv_output_size(std::int64_t input, int kernel, int stride, int padding, int dilation);
// conv2d_backward returns dx [N, C_in, H, W] and accumulates into grad_weight and
// grad_bias; an undefined grad_weight or grad_bias is skipped. `precision` is that of
// the GEMMs (bf16_mixed: the columns and the weight rounded to bf16, every tensor f32).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options,
              Precision precision = Precision::fp32);
Tensor conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, Tensor& grad_weight,
                       Tensor& grad_bias, const Conv2dOptions& options, Precision precision = Precision::fp32);

// ---- Embedding: ids i64 [...], weight [rows, dim] holding global rows
// [row_offset, row_offset + rows) -> y [..., dim].
// With mask_out_of_range, ids outside that range give exact zero rows (the
// vocab-parallel mask: the owner's row arrives through the all-reduce). Without it, any
// id outside the range is an InvalidArgument naming the id, checked before anything is
// written.
// embedding_backward scatter-adds the rows of grad_y into grad_weight [rows, dim] (the
// same row range) and skips every id outside [row_offset, row_offset + rows): those
// rows belong to another shard. It never throws for such ids. Ids have no gradient.

// PyTorch nn.Embedding's options (same names, same meaning):
// - padding_idx: that row receives no gradient (initialize_parameters zeroes it through
//   the layers' after_initialize()); a negative value counts from the end.
// - max_norm / norm_type: before each lookup, every looked-up row whose norm_type-norm
//   exceeds max_norm is rescaled in place, by max_norm / (norm + 1e-7) (torch's
//   embedding_renorm_; the forward writes into the weight).
// - scale_grad_by_freq: a row's gradient from each occurrence is divided by the number
//   of times its id occurs in the batch.
// - sparse: tessera has no sparse gradients; true is an UnsupportedError.
struct EmbeddingOptions {
  std::optional<std::int64_t> padding_idx;
  std::optional<double> max_norm;
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;
  bool sparse = false;
};
// Checks `options` for a table of num_embeddings rows and returns them with padding_idx
// in [0, num_embeddings). InvalidArgument names `who` and the option at fault
// (padding_idx outside [-num_embeddings, num_embeddings), max_norm negative or NaN,
// norm_type NaN);
// UnsupportedError for sparse.
EmbeddingOptions resolve_embedding_options(const EmbeddingOptions& options, std::int64_t num_embeddings,
                                           const std::string& who);
// PyTorch's extra_repr of the non-default options: ", padding_idx=0, max_norm=1" or "".
std::string embedding_options_str(const EmbeddingOptions& options);

Tensor embedding(const Tensor& ids, const Tensor& weight, std::int64_t row_offset = 0, bool mask_out_of_range = false);
// `options` must be resolved (padding_idx in [0, V) or none): ids equal to padding_idx
// add nothing; with scale_grad_by_freq each occurrence's row of grad_y is scaled by
// 1 / (occurrences of its id in ids) — counted over all of ids, so shards that see the
// same ids scale alike. max_norm and norm_type play no part (the renorm is not
// differentiated, as in PyTorch).
void embedding_backward(const Tensor& grad_y, const Tensor& ids, Tensor& grad_weight, std::int64_t row_offset = 0,
                        const EmbeddingOptions& options = {});

// max_norm's renormalisation, in place: each distinct id of `ids` inside this table's
// rows [row_offset, row_offset + rows) whose norm exceeds max_norm is scaled by
// max_norm / (norm + 1e-7). Ids outside the range: InvalidArgument before anything is
// written, or skipped with mask_out_of_range (another shard's rows).
// A table split along the embedding dim holds only part of each row: each rank's
// partial norms are then combined by `combine` (an all-reduce over the ranks holding
// the other parts of the rows, with the given reduction) before the rows are scaled.
// Partials are f64 [n distinct rows] on the weight's device: sum |x|^p for a finite
// norm_type p != 0 (the count of non-zeros for p = 0), max |x| for p = +inf, min |x|
// for p = -inf. `combine` is called on every rank with the same n when every rank sees
// the same ids, never when n = 0.
enum class NormReduction { sum, max, min };
NormReduction embedding_norm_reduction(double norm_type);
using CombineNormPartials = std::function<void(Tensor& partials, NormReduction reduction)>;
void embedding_renorm_(const Tensor& ids, Tensor& weight, double max_norm, double norm_type,
                       std::int64_t row_offset = 0, bool mask_out_of_range = false,
                       const CombineNormPartials& combine = {});

// ---- Activations (GELU is the exact erf form, PyTorch's default)
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& grad_y, const Tensor& x);
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& grad_y, const Tensor& x);

// ---- Norms over the last dim: x [..., n], gamma/beta [n].
// `mean` / `rstd` receive per-row statistics ([rows], x's dtype, accumulated in
// double) for the backward pass. An undefined gamma means scale 1 and an undefined beta means shift 0
// (affine = false). In the backward functions an undefined grad_gamma / grad_beta is
// skipped. The saved statistics must be defined (run the forward first).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& mean, Tensor& rstd);
Tensor layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, Tensor& grad_gamma, Tensor& grad_beta);
Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps, Tensor& rstd);
Tensor rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                         Tensor& grad_gamma);

}  // namespace tessera::nn::functional
