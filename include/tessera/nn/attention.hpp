#pragma once
// Multi-head scaled dot-product self-attention, with grouped-query attention (fewer key/
// value heads than query heads) and rotary position embeddings as options: the serial
// reference for the tensor-parallel attention (Q, K, V column-parallel over heads, O
// row-parallel).
//
// Layout: q, k, v are [B, S, heads * head_dim] exactly as a Linear produces them; head h
// owns the columns [h * head_dim, (h + 1) * head_dim). A column-parallel projection
// keeps whole heads on each rank (rank r holds heads [r * heads/tp, (r + 1) * heads/tp)),
// so the attention core runs unchanged on a rank's narrower tensors: it is a pure
// per-head function and computes on each shard exactly what the serial layer computes on
// those heads.
//
// Grouped-query attention (GQA): k and v are [B, S, kv_heads * head_dim] with kv_heads
// dividing heads; query head h reads key/value head h / (heads / kv_heads) (consecutive
// query heads share one, as Llama's repeat_kv lays them out).
//
// Rotary position embeddings (RoPE) rotate q and k before the scores: in each head the
// interleaved feature pair (2i, 2i+1) at position s turns by s * theta^(-2i / head_dim)
// (the original Llama pairing; Hugging Face's half-split pairs (i, i + head_dim/2)).

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

namespace functional {

// ---- Attention core: q [B, S, heads * head_dim], k and v [B, S, kv_heads * head_dim]
// (one f32/f64 dtype, contiguous; kv_heads dividing heads, taken from k's width) ->
// context [B, S, heads * head_dim], scores scaled by 1/sqrt(head_dim).
// With `causal`, query i attends to keys j <= i only. Scores, softmax (max-subtracted)
// and the weighted sum are accumulated in double and rounded once. `probs` receives the
// softmax probabilities [B, heads, S, S] (masked entries exactly 0) for the backward.
Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& probs);

struct AttentionGrads {
  Tensor q, k, v;  // each the shape of the corresponding forward input (dk, dv: summed over the group)
};
// Gradients of q, k and v given the context gradient [B, S, heads * head_dim] and the
// probabilities saved by attention_core. No `causal` argument: the saved probabilities
// carry the mask (a masked entry is exactly 0 and contributes nothing).
AttentionGrads attention_core_backward(const Tensor& grad_context, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& probs, std::int64_t heads);

// ---- Rotary position embeddings: x [B, S, heads * head_dim] (f32/f64, head_dim even) ->
// x with each head's pair (2i, 2i+1) at position s rotated by s * theta^(-2i / head_dim),
// positions 0 .. S-1. rope_backward applies the inverse rotation (the adjoint of a
// rotation): the gradient of x given the gradient of the output.
Tensor rope(const Tensor& x, std::int64_t head_dim, double theta);
Tensor rope_backward(const Tensor& grad_output, std::int64_t head_dim, double theta);

}  // namespace functional

// The options of a current decoder's attention (defaults: plain multi-head attention).
struct AttentionOptions {
  std::int64_t n_kv_heads = 0;  // key/value heads; 0 means n_heads. Must divide n_heads.
  bool rope = false;            // rotary position embeddings on q and k
  double rope_theta = 10000.0;  // RoPE base (> 0)
  bool causal = true;
};

// Children "q", "k", "v", "o": Linear without bias, as in Llama (this also keeps the
// row-parallel O free of a replicated bias): q and o d_model x d_model, k and v
// d_model -> n_kv_heads * head_dim. x [B, S, d_model] -> [B, S, d_model].
//
// Tensor-parallel contract: forward and backward reach the projections only through
// at("q") ... at("o") (parallelize replaces them in place), and take the number of heads
// and the sequence length from what q produces, never from the constructor: under
// tensor parallelism q yields n_heads / tp heads (and o accepts that narrower context);
// under sequence parallelism q all-gathers the sequence, so x may hold a sequence shard
// while q, k and v hold the full sequence. head_dim = d_model / n_heads is the one fixed
// quantity. The output is whatever o returns. RoPE positions are the rows of what q and k
// produce (the full sequence, also under sequence parallelism).
//
// Key/value heads under tensor parallelism: when tp divides n_kv_heads, k and v are
// column-parallel like q and each rank's kv_heads / heads ratio stays the serial one.
// Otherwise each rank's k and v produce the key/value heads its query heads read, one
// per `local_kv_group` consecutive local query heads (set_local_kv_group, called by the
// decoder's tensor-parallel conversion); forward checks that the widths agree with it.
class MultiHeadAttention : public Module {
 public:
  // d_model must be a positive multiple of n_heads.
  MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, bool causal = true, DType dtype = DType::f32,
                     Device device = Device::host());
  // n_kv_heads (0: n_heads) must divide n_heads; rope_theta must be > 0.
  MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, const AttentionOptions& options,
                     DType dtype = DType::f32, Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  // dx = the sum of the q, k and v projections' input gradients.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "MultiHeadAttention"; }
  void visit_activations(ActivationVisitor& v) override {
    v.tensor(q_);
    v.tensor(k_);
    v.tensor(v_);
    v.tensor(probs_);
    v.count(local_heads_);
    Module::visit_activations(v);  // q, k, v, o
  }

  std::int64_t d_model() const { return d_model_; }
  std::int64_t n_heads() const { return n_heads_; }  // the full (serial) head count
  std::int64_t n_kv_heads() const { return n_kv_heads_; }
  const AttentionOptions& options() const { return options_; }
  // Query heads per key/value head in the tensors this process's q and k produce: the
  // serial n_heads / n_kv_heads unless set (InvalidArgument unless >= 1).
  std::int64_t local_kv_group() const { return local_kv_group_; }
  void set_local_kv_group(std::int64_t group);
  std::int64_t head_dim() const { return head_dim_; }
  bool causal() const { return causal_; }
  // Heads seen by the last forward (n_heads serially, fewer under tensor parallelism);
  // 0 before the first forward.
  std::int64_t local_heads() const { return local_heads_; }
  // "MultiHeadAttention(d_model=8, n_heads=2, causal=true)"; n_kv_heads and rope_theta
  // are named when they are not the defaults.
  std::string describe() const;

 private:
  std::int64_t d_model_, n_heads_, head_dim_;
  bool causal_;
  AttentionOptions options_;
  std::int64_t n_kv_heads_, local_kv_group_;
  std::int64_t local_heads_ = 0;
  Tensor q_, k_, v_, probs_;
};

}  // namespace tessera::nn
