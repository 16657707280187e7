#pragma once
// A Llama-style decoder-only transformer: the serial reference model that parallelize
// converts (Q/K/V and gate/up column-parallel, O and down row-parallel, norms sequence-
// parallel, the output head column-parallel over the vocabulary).
//
// Every module here reaches its children through at() at forward and backward time,
// never through pointers cached at construction, so a child replaced in place by
// parallelize takes effect. Shapes inside a block come from what the children produce
// (heads, hidden width, sequence length), so the same code runs the serial and the
// tensor-/sequence-parallel model.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::models {

// Pre-norm block: h = x + attn(attn_norm(x)); y = h + mlp(mlp_norm(h)).
// Children "attn_norm" (RMSNorm), "attn" (MultiHeadAttention, causal), "mlp_norm"
// (RMSNorm), "mlp" (SwiGLU). x [B, S, d_model] -> [B, S, d_model] (S may be a sequence
// shard under sequence parallelism: the residual adds are local).
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(std::int64_t d_model, std::int64_t n_heads, std::int64_t hidden, double eps = 1e-6,
                   DType dtype = DType::f32, Device device = Device::host());
  // With grouped-query attention and/or rotary embeddings (attention.causal is ignored:
  // a decoder block is causal).
  TransformerBlock(std::int64_t d_model, std::int64_t n_heads, std::int64_t hidden,
                   const nn::AttentionOptions& attention, double eps = 1e-6, DType dtype = DType::f32,
                   Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "TransformerBlock"; }

  std::int64_t d_model() const { return d_model_; }
  std::int64_t n_heads() const { return n_heads_; }
  std::int64_t hidden() const { return hidden_; }
  double eps() const { return eps_; }
  // "TransformerBlock(d_model=8, n_heads=2, hidden=16)".
  std::string describe() const;

 private:
  std::int64_t d_model_, n_heads_, hidden_;
  double eps_;
};

struct DecoderConfig {
  std::int64_t vocab = 0;
  std::int64_t d_model = 0;
  std::int64_t n_heads = 0;
  std::int64_t hidden = 0;  // SwiGLU hidden width
  std::int64_t n_layers = 0;
  double eps = 1e-6;  // RMSNorm eps, every norm
  // The output projection reuses the embedding table (logits = h · embed.weightᵀ):
  // there is no "head" child and the table's gradient collects both uses.
  bool tie_embeddings = false;
  // Grouped-query attention: key/value heads (0 means n_heads, plain multi-head
  // attention); must divide n_heads. The k and v projections are d_model ->
  // n_kv_heads * (d_model / n_heads).
  std::int64_t n_kv_heads = 0;
  // Rotary position embeddings on q and k (interleaved pairs, nn/attention.hpp), base theta.
  bool rope = false;
  double rope_theta = 10000.0;

  // n_kv_heads with 0 resolved to n_heads.
  std::int64_t kv_heads() const { return n_kv_heads == 0 ? n_heads : n_kv_heads; }
  // The attention options of every block.
  nn::AttentionOptions attention_options() const;

  // The decoder's parameter count (the serial model every rank builds before
  // parallelize slices it); ConfigError when it does not fit in int64.
  std::int64_t parameter_count() const;
};

// Children "embed" (Embedding vocab x d_model), "layers" (Sequential of n_layers
// TransformerBlocks: FQNs such as layers.0.attn.q.weight), "norm" (RMSNorm) and "head"
// (Linear d_model -> vocab, no bias; absent with tie_embeddings, when the logits use the
// embedding table itself).
// ids i64 [B, S] -> logits [B, S, vocab]; backward(d logits) returns an undefined
// Tensor (ids have no gradient).
class Decoder : public nn::Module {
 public:
  explicit Decoder(const DecoderConfig& config, DType dtype = DType::f32, Device device = Device::host());

  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_logits) override;
  std::string type_name() const override { return "Decoder"; }
  void visit_activations(nn::ActivationVisitor& v) override {
    v.tensor(normed_);
    Module::visit_activations(v);
  }
  // With tie_embeddings the head reads "embed.weight" in the decoder's own forward.
  std::vector<std::string> tied_parameter_paths() const override;

  const DecoderConfig& config() const { return config_; }
  // "Decoder(vocab=32, d_model=8, n_heads=2, hidden=16, n_layers=2)"; with
  // ", n_kv_heads=1" and ", rope_theta=10000" when they are set.
  std::string describe() const;

 private:
  DecoderConfig config_;
  Tensor normed_;  // the final norm's output, kept for the tied head's backward
};

// How to tensor-parallelise a Decoder (KempnerForge's plan, seed 001): attention
// Q/K/V Colwise (heads split over tp), O Rowwise; SwiGLU gate/up Colwise, down
// Rowwise; the output head Colwise over the vocabulary (logits stay vocab-sharded for
// tp::vocab_parallel_cross_entropy); the token embedding and the norms replicated.
// With sequence parallelism the norms run on sequence shards, Colwise layers
// all-gather the sequence and Rowwise layers reduce-scatter it; the Replicate -> Shard
// transition is a split of the replicated embedding's output (no communication
// forward), so the first block's residual stream is already sharded. Tied embeddings switch sequence parallelism off, and keep the head replicated
// (a Colwise head would impose a vocabulary sharding on the shared table).
//
// Grouped-query attention: when tp divides n_kv_heads, k and v are Colwise like q (each
// rank holds n_kv_heads / tp whole key/value heads, tp: Shard(0)). Otherwise the key/
// value heads are repeated: the plan leaves k and v out (kv_heads_split false) and
// parallelize_decoder replaces them by projections that keep the weights tp-replicated
// and compute on each rank the key/value heads its query heads read
// (src/models/kv_heads_projection.hpp). `tp_size` decides which; the default 1 always
// splits (right for every tp when n_kv_heads = n_heads).
struct DecoderTpPlan {
  tp::ParallelizePlan plan;
  bool sequence_parallel = false;    // what the plan does (may differ from what was asked)
  std::string reason;                // why sequence parallelism was switched off, if it was
  bool vocab_sharded_logits = true;  // false with tied embeddings: logits are replicated
  bool kv_heads_split = true;        // false: k and v repeated, applied by parallelize_decoder
};
DecoderTpPlan decoder_tp_plan(const DecoderConfig& config, bool sequence_parallel, int tp_size = 1);

// Converts `model` in place over `tp`: tp::parallelize with decoder_tp_plan(config,
// sequence_parallel, tp.size()), then the repeated key/value projections when tp does
// not divide n_kv_heads. Returns the plan it applied. InvalidArgument naming n_heads
// when tp does not divide it. Collective over tp only where tp::parallelize is.
DecoderTpPlan parallelize_decoder(Decoder& model, Communicator& tp, bool sequence_parallel);

// Bytes of the activations one local sequence of `seq_len` tokens keeps alive at the
// peak of a training step (the layers' caches, sequence-parallel all-gathers, the
// attention probabilities, the logits and their gradient), at tensor-parallel size `tp`
// with or without sequence parallelism, with the blocks `policy` checkpoints keeping only
// their input plus one block recomputed at a time during backward (every layer of a
// checkpointed block releasing its caches). An estimate for memory plans (tessera-run
// --dry-run, the RSS check of test activation_checkpointing_rss), not a measurement.
//
// `units` limits the estimate to the units a pipeline stage holds (a contiguous run of
// embed, layers.0 .. layers.N-1, norm, head); the default covers the whole decoder, and
// the estimates of the stages of any split add up to it.
struct DecoderUnits {
  bool embed = true;
  std::int64_t first_layer = 0;
  std::int64_t layers = -1;  // blocks from first_layer; < 0: through the last
  bool norm = true, head = true;
};
// An estimate beyond 9e18 bytes (a hostile seq_len or width; no int64 overflow) is
// decoder_activation_bytes_max.
inline constexpr std::int64_t decoder_activation_bytes_max = 9'000'000'000'000'000'000;
std::int64_t decoder_activation_bytes(const DecoderConfig& config, std::int64_t seq_len, int tp, bool sp,
                                      const nn::CheckpointPolicy& policy = {}, const DecoderUnits& units = {});

// Activation checkpointing of the decoder's TransformerBlocks ("layers.<i>") that
// `policy` selects (nn/activation_checkpoint.hpp); returns their paths. Call it after
// parallelize_decoder and before dp::DataParallel; FQNs do not change.
std::vector<std::string> checkpoint_activations(Decoder& model, const nn::CheckpointPolicy& policy);

}  // namespace tessera::models
