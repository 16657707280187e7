#include "tessera/models/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/kv_heads_projection.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/error.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/swiglu.hpp"
#include "tessera/ops.hpp"
#include "tessera/placement.hpp"

namespace tessera::models {

std::int64_t DecoderConfig::parameter_count() const {
  using tessera::detail::checked_add;
  using tessera::detail::checked_mul;
  const char* who = "decoder size";
  try {
    const std::int64_t table = checked_mul(vocab, d_model, who);
    // A layer: two RMSNorm weights, q/o (d x d), k/v (d x n_kv_heads * head_dim), SwiGLU
    // gate/up (d x hidden) and down.
    const std::int64_t kv_width = n_heads > 0 ? kv_heads() * (d_model / n_heads) : d_model;
    const std::int64_t attention = checked_add(checked_mul(2, checked_mul(d_model, d_model, who), who),
                                               checked_mul(2, checked_mul(d_model, kv_width, who), who), who);
    const std::int64_t layer = checked_add(checked_mul(2, d_model, who),
                                           checked_add(attention,
                                                       checked_mul(3, checked_mul(d_model, hidden, who), who), who),
                                           who);
    std::int64_t total = checked_add(table, checked_mul(n_layers, layer, who), who);
    total = checked_add(total, d_model, who);  // the final norm
    return tie_embeddings ? total : checked_add(total, table, who);  // the head
  } catch (const ShapeError& e) {
    throw ConfigError(std::string("the decoder's parameter count does not fit in int64 (") + e.what() + ")");
  }
}

nn::AttentionOptions DecoderConfig::attention_options() const {
  nn::AttentionOptions o;
  o.n_kv_heads = n_kv_heads;
  o.rope = rope;
  o.rope_theta = rope_theta;
  o.causal = true;
  return o;
}

namespace {

// a + b into a new tensor (the residual stream must not alias a child's output or cache).
Tensor residual_add(const Tensor& a, const Tensor& b, const std::string& layer, const char* what) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    throw ShapeError(layer + ": " + what + ": residual " + a.str() + " and branch output " + b.str() +
                     " must have one shape and dtype");
  }
  Tensor sum = a.clone();
  ops::axpy(1.0, b.contiguous(), sum);
  return sum;
}

}  // namespace

TransformerBlock::TransformerBlock(std::int64_t d_model, std::int64_t n_heads, std::int64_t hidden, double eps,
                                   DType dtype, Device device)
    : TransformerBlock(d_model, n_heads, hidden, nn::AttentionOptions{}, eps, dtype, device) {}

TransformerBlock::TransformerBlock(std::int64_t d_model, std::int64_t n_heads, std::int64_t hidden,
                                   const nn::AttentionOptions& attention, double eps, DType dtype, Device device)
    : d_model_(d_model), n_heads_(n_heads), hidden_(hidden), eps_(eps) {
  if (d_model < 1 || n_heads < 1 || hidden < 1 || d_model % n_heads != 0) {
    throw InvalidArgument(describe() + ": d_model must be a positive multiple of n_heads and hidden >= 1");
  }
  nn::AttentionOptions causal = attention;
  causal.causal = true;
  register_child("attn_norm", std::make_unique<nn::RMSNorm>(d_model, eps, dtype, device));
  register_child("attn", std::make_unique<nn::MultiHeadAttention>(d_model, n_heads, causal, dtype, device));
  register_child("mlp_norm", std::make_unique<nn::RMSNorm>(d_model, eps, dtype, device));
  register_child("mlp", std::make_unique<nn::SwiGLU>(d_model, hidden, dtype, device));
}

std::string TransformerBlock::describe() const {
  return "TransformerBlock(d_model=" + std::to_string(d_model_) + ", n_heads=" + std::to_string(n_heads_) +
         ", hidden=" + std::to_string(hidden_) + ")";
}

Tensor TransformerBlock::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  Tensor h = residual_add(input, at("attn").forward(at("attn_norm").forward(input)), describe(), "attention");
  return residual_add(h, at("mlp").forward(at("mlp_norm").forward(h)), describe(), "mlp");
}

Tensor TransformerBlock::backward(const Tensor& grad_output) {
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  // y = h + mlp(mlp_norm(h)): dh = dy + the branch's input gradient; likewise for x.
  Tensor dh = residual_add(grad_output, at("mlp_norm").backward(at("mlp").backward(grad_output)), describe(),
                           "mlp backward");
  return residual_add(dh, at("attn_norm").backward(at("attn").backward(dh)), describe(), "attention backward");
}

namespace {

// The table a tied head shares: embed's "weight", found through named_parameters() so a
// data-parallel wrapper around the embedding (which registers the same Parameter) does
// not hide it. It must stay whole over tp (a vocabulary-sharded table cannot serve as a
// replicated head); the decoder declares it tied, so data parallelism keeps it whole too.
Parameter& tied_table(nn::Module& embed, const std::string& who) {
  for (auto& [name, p] : embed.named_parameters()) {
    if (name != "weight") continue;
    if (p->placement.tp.is_shard()) {
      throw InvalidArgument(who + ": tied embeddings need 'embed' to stay a serial Embedding, found " +
                            embed.type_name() + " with its table " + p->placement.str());
    }
    return *p;
  }
  throw InvalidArgument(who + ": tied embeddings need 'embed' to stay a serial Embedding, found " + embed.type_name());
}

// ", n_kv_heads=1, rope_theta=10000" for the options that are set (nothing by default).
std::string attention_extras(const DecoderConfig& c) {
  std::string s;
  if (c.n_kv_heads != 0 && c.n_kv_heads != c.n_heads) s += ", n_kv_heads=" + std::to_string(c.n_kv_heads);
  if (c.rope) {
    char theta[32];
    std::snprintf(theta, sizeof theta, "%g", c.rope_theta);
    s += std::string(", rope_theta=") + theta;
  }
  return s;
}

}  // namespace

Decoder::Decoder(const DecoderConfig& config, DType dtype, Device device) : config_(config) {
  if (config.vocab < 1 || config.d_model < 1 || config.n_heads < 1 || config.hidden < 1 || config.n_layers < 0 ||
      config.d_model % config.n_heads != 0) {
    throw InvalidArgument(describe() +
                          ": vocab, d_model, n_heads and hidden must be >= 1, n_layers >= 0, and d_model a "
                          "multiple of n_heads");
  }
  if (config.n_kv_heads < 0 || config.n_heads % config.kv_heads() != 0) {
    throw InvalidArgument(describe() + ": n_kv_heads (" + std::to_string(config.n_kv_heads) +
                          ") must divide n_heads (" + std::to_string(config.n_heads) +
                          "); 0 means n_heads (no grouping)");
  }
  if (config.rope && ((config.d_model / config.n_heads) % 2 != 0 || !(config.rope_theta > 0) ||
                      !std::isfinite(config.rope_theta))) {
    throw InvalidArgument(describe() + ": rope needs an even head dimension (d_model / n_heads = " +
                          std::to_string(config.d_model / config.n_heads) + ") and a finite rope_theta > 0");
  }
  register_child("embed", std::make_unique<nn::Embedding>(config.vocab, config.d_model, dtype, device));
  auto layers = std::make_unique<nn::Sequential>();
  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    layers->append(std::make_unique<TransformerBlock>(config.d_model, config.n_heads, config.hidden,
                                                      config.attention_options(), config.eps, dtype, device));
  }
  register_child("layers", std::move(layers));
  register_child("norm", std::make_unique<nn::RMSNorm>(config.d_model, config.eps, dtype, device));
  if (!config.tie_embeddings) {
    register_child("head", std::make_unique<nn::Linear>(config.d_model, config.vocab, /*bias=*/false, dtype, device));
  }
}

std::string Decoder::describe() const {
  return "Decoder(vocab=" + std::to_string(config_.vocab) + ", d_model=" + std::to_string(config_.d_model) +
         ", n_heads=" + std::to_string(config_.n_heads) + ", hidden=" + std::to_string(config_.hidden) +
         ", n_layers=" + std::to_string(config_.n_layers) + attention_extras(config_) + ")";
}

Tensor Decoder::forward(const Tensor& ids) {
  if (!ids.defined()) throw InvalidArgument(describe() + ": forward ids are undefined");
  if (ids.dim() != 2 || ids.dtype() != DType::i64) {
    throw ShapeError(describe() + ": ids " + ids.str() + " must be i64 [B, S]");
  }
  Tensor x = at("embed").forward(ids);
  x = at("layers").forward(x);
  x = at("norm").forward(x);
  if (!config_.tie_embeddings) return at("head").forward(x);
  normed_ = x;
  return nn::functional::linear(x, tied_table(at("embed"), describe()).value, Tensor(), compute_precision());
}

std::vector<std::string> Decoder::tied_parameter_paths() const {
  if (!config_.tie_embeddings) return {};
  return {"embed.weight"};
}

Tensor Decoder::backward(const Tensor& grad_logits) {
  if (!grad_logits.defined()) throw InvalidArgument(describe() + ": backward grad_logits is undefined");
  Tensor g;
  if (config_.tie_embeddings) {
    if (!normed_.defined()) throw InvalidArgument(describe() + ": backward without a preceding forward");
    Parameter& table = tied_table(at("embed"), describe());
    Tensor no_bias;
    g = nn::functional::linear_backward(grad_logits.contiguous(), normed_, table.value, table.grad, no_bias,
                                        compute_precision());
    normed_ = Tensor();
  } else {
    g = at("head").backward(grad_logits);
  }
  g = at("norm").backward(g);
  g = at("layers").backward(g);
  (void)at("embed").backward(g);
  return Tensor();
}

}  // namespace tessera::models

namespace tessera::models {

DecoderTpPlan decoder_tp_plan(const DecoderConfig& config, bool sequence_parallel, int tp_size) {
  using tp::Layout;
  using tp::ParallelStyle;
  if (tp_size < 1) throw InvalidArgument("decoder_tp_plan: tp_size must be >= 1, got " + std::to_string(tp_size));
  DecoderTpPlan out;
  out.sequence_parallel = sequence_parallel;
  // Whole key/value heads per rank when tp divides them; repeated otherwise.
  out.kv_heads_split = config.n_heads > 0 && config.kv_heads() % tp_size == 0;
  if (sequence_parallel && config.tie_embeddings) {
    out.sequence_parallel = false;
    out.reason =
        "sequence parallelism is off: the embeddings are tied, and a Colwise output head would impose a vocabulary "
        "sharding on the table the replicated embedding shares";
  }
  const bool sp = out.sequence_parallel;
  const Layout col_in = sp ? Layout::shard_sequence : Layout::replicate;
  const Layout row_out = sp ? Layout::shard_sequence : Layout::replicate;
  auto& plan = out.plan;
  // The embedding stays replicated. With sequence parallelism its output is split along
  // the sequence right away: the first block's residual stream must already be a
  // shard (a split at the first norm would leave the residual x replicated).
  plan.push_back({"embed", ParallelStyle::replicated(sp ? Layout::shard_sequence : Layout::replicate)});
  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    const std::string block = "layers." + std::to_string(i) + ".";
    if (sp) {
      plan.push_back({block + "attn_norm", ParallelStyle::sequence_parallel()});
      plan.push_back({block + "mlp_norm", ParallelStyle::sequence_parallel()});
    }
    for (const char* name : {"attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up"}) {
      const bool kv = name[5] == 'k' || name[5] == 'v';
      if (kv && !out.kv_heads_split) continue;  // parallelize_decoder repeats them
      plan.push_back({block + name, ParallelStyle::colwise(col_in)});
    }
    for (const char* name : {"attn.o", "mlp.down"}) {
      plan.push_back({block + name, ParallelStyle::rowwise(Layout::shard_features, row_out)});
    }
  }
  if (sp) plan.push_back({"norm", ParallelStyle::sequence_parallel()});
  if (config.tie_embeddings) {
    out.vocab_sharded_logits = false;
  } else {
    plan.push_back({"head", ParallelStyle::colwise(col_in)});
  }
  return out;
}

namespace {

// The estimate's formula, in the number type N: long double first, to see whether it
// fits in int64 at all (a hostile seq_len, batch or width multiplies past it), then
// int64 for the exact count.
template <class N>
N activation_floats(const DecoderConfig& a, std::int64_t seq_len, int tp, bool sp, const nn::CheckpointPolicy& policy,
                    const DecoderUnits& units) {
  const N S = static_cast<N>(seq_len), Sl = static_cast<N>(sp ? seq_len / tp : seq_len), d = static_cast<N>(a.d_model);
  // The widest rank's share of the features that may split unevenly (the partition rule).
  auto widest = [tp](std::int64_t extent) { return static_cast<N>(shard_range(extent, tp, 0).length); };
  const N dl = static_cast<N>(a.d_model / tp), heads = static_cast<N>(a.n_heads / tp), hl = widest(a.hidden);
  // k and v: whole key/value heads per rank when tp divides them, at least one otherwise.
  const N kvl = static_cast<N>(std::max<std::int64_t>(1, a.kv_heads() / tp) * (a.d_model / a.n_heads));
  const N vl = a.tie_embeddings ? static_cast<N>(a.vocab) : widest(a.vocab);
  N per_layer = 8 * Sl * d             // norms (input, output), residual streams, row outputs
                + 2 * S * dl + 2 * S * kvl  // q, attention output; k, v
                + heads * S * S        // attention probabilities
                + 3 * S * hl;          // gate, up, their product
  if (sp) per_layer += 2 * S * d;      // the all-gathered inputs of the column layers
  // A checkpointed block keeps its input (a residual-stream shard); during backward the
  // block being recomputed holds all of its activations again (its input among them).
  const std::int64_t first = std::clamp<std::int64_t>(units.first_layer, 0, a.n_layers);
  const std::int64_t end = units.layers < 0 ? a.n_layers : std::min(a.n_layers, first + units.layers);
  std::int64_t blocks = 0, checkpointed = 0;
  for (std::int64_t i = first; i < end; ++i) {
    ++blocks;
    checkpointed += policy.selects(i) ? 1 : 0;
  }
  N floats = static_cast<N>(blocks - checkpointed) * per_layer;
  if (checkpointed > 0) floats += static_cast<N>(checkpointed - 1) * Sl * d + per_layer;
  if (units.embed) floats += Sl * d;                          // the embedding's output
  if (units.norm) floats += Sl * d + (sp ? S * d : 0);        // the final norm's output (all-gathered)
  if (units.head) floats += Sl * d + 2 * S * vl;              // the head's input; the logits and their gradient
  return floats * static_cast<N>(sizeof(float));
}

}  // namespace

std::int64_t decoder_activation_bytes(const DecoderConfig& a, std::int64_t seq_len, int tp, bool sp,
                                      const nn::CheckpointPolicy& policy, const DecoderUnits& units) {
  if (activation_floats<long double>(a, seq_len, tp, sp, policy, units) > 9.0e18L) return decoder_activation_bytes_max;
  return activation_floats<std::int64_t>(a, seq_len, tp, sp, policy, units);
}

std::vector<std::string> checkpoint_activations(Decoder& model, const nn::CheckpointPolicy& policy) {
  return nn::checkpoint_blocks(model, "layers", policy);
}

DecoderTpPlan parallelize_decoder(Decoder& model, Communicator& tp, bool sequence_parallel) {
  const DecoderConfig& config = model.config();
  if (config.n_heads % tp.size() != 0) {
    throw InvalidArgument("parallelize_decoder: n_heads (" + std::to_string(config.n_heads) +
                          ") must be divisible by the tensor-parallel size (" + std::to_string(tp.size()) +
                          "): query heads are split over tp");
  }
  DecoderTpPlan out = decoder_tp_plan(config, sequence_parallel, tp.size());
  tp::parallelize(model, tp, out.plan);
  if (out.kv_heads_split) return out;
  const detail::KvHeadsOfRank mine = detail::kv_heads_of_rank(config.n_heads, config.kv_heads(), tp.size(), tp.rank());
  const std::int64_t head_dim = config.d_model / config.n_heads;
  const std::optional<int> sequence_dim = out.sequence_parallel ? std::optional<int>(1) : std::nullopt;
  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    const std::string attn = "layers." + std::to_string(i) + ".attn";
    for (const char* name : {".k", ".v"}) {
      const std::string path = attn + name;
      if (dynamic_cast<nn::Linear*>(&model.at(path)) == nullptr) {
        throw InvalidArgument("parallelize_decoder: '" + path + "' is a " + model.at(path).type_name() +
                              ", expected the serial Linear (was the model converted already?)");
      }
      // Out of the tree (an empty Sequential holds its place) and into its wrapper.
      std::unique_ptr<nn::Linear> linear(
          static_cast<nn::Linear*>(model.replace(path, std::make_unique<nn::Sequential>()).release()));
      model.replace(path, std::make_unique<detail::KvHeadsProjection>(std::move(linear), tp, mine.heads, head_dim,
                                                                      sequence_dim, path));
    }
    dynamic_cast<nn::MultiHeadAttention&>(model.at(attn)).set_local_kv_group(mine.local_group);
  }
  return out;
}

}  // namespace tessera::models
