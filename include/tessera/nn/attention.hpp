#pragma once
// Multi-head scaled dot-product self-attention: the serial reference for the
// tensor-parallel attention (Q, K, V column-parallel over heads, O row-parallel).
//
// Layout: q, k, v are [B, S, heads * head_dim] exactly as a Linear produces them; head h
// owns the columns [h * head_dim, (h + 1) * head_dim). A column-parallel projection
// keeps whole heads on each rank (rank r holds heads [r * heads/tp, (r + 1) * heads/tp)),
// so the attention core runs unchanged on a rank's narrower tensors: it is a pure
// per-head function and computes on each shard exactly what the serial layer computes on
// those heads.

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

namespace functional {

// ---- Attention core: q, k, v [B, S, heads * head_dim] (one f32/f64 dtype, contiguous,
// host) -> context [B, S, heads * head_dim], scores scaled by 1/sqrt(head_dim).
// With `causal`, query i attends to keys j <= i only. Scores, softmax (max-subtracted)
// and the weighted sum are accumulated in double and rounded once. `probs` receives the
// softmax probabilities [B, heads, S, S] (masked entries exactly 0) for the backward.
Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& probs);

struct AttentionGrads {
  Tensor q, k, v;  // each the shape of the corresponding forward input
};
// Gradients of q, k and v given the context gradient [B, S, heads * head_dim] and the
// probabilities saved by attention_core. No `causal` argument: the saved probabilities
// carry the mask (a masked entry is exactly 0 and contributes nothing).
AttentionGrads attention_core_backward(const Tensor& grad_context, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& probs, std::int64_t heads);

}  // namespace functional

// Children "q", "k", "v", "o": Linear(d_model, d_model, bias = false) each, as in Llama
// (no projection biases; this also keeps the row-parallel O free of a replicated bias).
// x [B, S, d_model] -> [B, S, d_model].
//
// Tensor-parallel contract: forward and backward reach the projections only through
// at("q") ... at("o") (parallelize replaces them in place), and take the number of heads
// and the sequence length from what q produces, never from the constructor: under
// tensor parallelism q yields n_heads / tp heads (and o accepts that narrower context);
// under sequence parallelism q all-gathers the sequence, so x may hold a sequence shard
// while q, k and v hold the full sequence. head_dim = d_model / n_heads is the one fixed
// quantity. The output is whatever o returns.
class MultiHeadAttention : public Module {
 public:
  // d_model must be a positive multiple of n_heads.
  MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, bool causal = true, DType dtype = DType::f32,
                     Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  // dx = the sum of the q, k and v projections' input gradients.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "MultiHeadAttention"; }

  std::int64_t d_model() const { return d_model_; }
  std::int64_t n_heads() const { return n_heads_; }  // the full (serial) head count
  std::int64_t head_dim() const { return head_dim_; }
  bool causal() const { return causal_; }
  // Heads seen by the last forward (n_heads serially, fewer under tensor parallelism);
  // 0 before the first forward.
  std::int64_t local_heads() const { return local_heads_; }
  // "MultiHeadAttention(d_model=8, n_heads=2, causal=true)".
  std::string describe() const;

 private:
  std::int64_t d_model_, n_heads_, head_dim_;
  bool causal_;
  std::int64_t local_heads_ = 0;
  Tensor q_, k_, v_, probs_;
};

}  // namespace tessera::nn
