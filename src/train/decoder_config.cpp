// model.type decoder: its `model` and `data` keys and the rules between them and the
// parallelism (what the tensor-parallel layers and the token data need).
#include <string>

#include "config_parser.hpp"
#include "tessera/error.hpp"

namespace tessera::train::detail {

void parse_decoder_model(const Parser& p, const YAML::Node& v, const std::string& key, RunConfig& c) {
  auto& dm = c.decoder;
  p.section(v, key, {
    {"type", [&](const YAML::Node& x, const std::string& kk) { p.choice(x, kk, kModelTypes); }},
    {"vocab", [&](const YAML::Node& x, const std::string& kk) { dm.arch.vocab = p.integer(x, kk, 2); }},
    {"d_model", [&](const YAML::Node& x, const std::string& kk) { dm.arch.d_model = p.integer(x, kk, 1); }},
    {"n_heads", [&](const YAML::Node& x, const std::string& kk) { dm.arch.n_heads = p.integer(x, kk, 1); }},
    {"hidden", [&](const YAML::Node& x, const std::string& kk) { dm.arch.hidden = p.integer(x, kk, 1); }},
    {"n_layers", [&](const YAML::Node& x, const std::string& kk) { dm.arch.n_layers = p.integer(x, kk, 0); }},
    {"eps", [&](const YAML::Node& x, const std::string& kk) {
       dm.arch.eps = p.number(x, kk, 0.0, /*min_inclusive=*/false);  // finite, > 0 (RMSNorm's epsilon)
     }},
    {"tie_embeddings", [&](const YAML::Node& x, const std::string& kk) {
       dm.arch.tie_embeddings = p.boolean(x, kk);
     }},
    {"sequence_parallel", [&](const YAML::Node& x, const std::string& kk) {
       dm.sequence_parallel = p.boolean(x, kk);
     }},
    {"lora", [&](const YAML::Node& x, const std::string& kk) {
       p.section(x, kk, {
         {"rank", [&](const YAML::Node& y, const std::string& k3) { dm.lora.rank = p.integer(y, k3, 1); }},
         {"alpha", [&](const YAML::Node& y, const std::string& k3) {
            dm.lora.alpha = p.number(y, k3, 0.0, /*min_inclusive=*/false);
          }},
         {"targets", [&](const YAML::Node& y, const std::string& k3) { dm.lora.targets = p.strings(y, k3); }},
       });
       if (dm.lora.rank == 0) throw ConfigError(p.where(x, kk) + ".rank is required (>= 1)");
       if (dm.lora.alpha == 0) dm.lora.alpha = static_cast<double>(dm.lora.rank);
     }},
    {"seq_len", [&](const YAML::Node& x, const std::string& kk) { dm.seq_len = p.integer(x, kk, 1); }},
    {"n_kv_heads", [&](const YAML::Node& x, const std::string& kk) {
       dm.arch.n_kv_heads = p.integer(x, kk, 1);
     }},
    {"rope", [&](const YAML::Node& x, const std::string& kk) { dm.arch.rope = p.boolean(x, kk); }},
    {"rope_theta", [&](const YAML::Node& x, const std::string& kk) {
       dm.arch.rope_theta = p.number(x, kk, 0.0, /*min_inclusive=*/false);  // finite, > 0
     }},
    {"activation_checkpointing", [&](const YAML::Node& x, const std::string& kk) {
       c.activation_checkpointing = nn::CheckpointPolicy::parse(p.string(x, kk), p.where(x, kk));
     }},
  });
}

void parse_decoder_data(const Parser& p, const YAML::Node& v, const std::string& key, DataConfig& d) {
  p.section(v, key, {
    {"source", [&](const YAML::Node& x, const std::string& kk) {
       d.source = p.choice(x, kk, {"synthetic", "bytes"});
     }},
    {"path", [&](const YAML::Node& x, const std::string& kk) { d.path = p.string(x, kk); }},
    {"tokens", [&](const YAML::Node& x, const std::string& kk) { d.tokens = p.integer(x, kk, 2); }},
    {"branching", [&](const YAML::Node& x, const std::string& kk) { d.branching = p.integer(x, kk, 1); }},
    {"seed", [&](const YAML::Node& x, const std::string& kk) {
       d.seed = static_cast<std::uint64_t>(p.integer(x, kk, 0));
     }},
    {"batch_size", [&](const YAML::Node& x, const std::string& kk) { d.batch_size = p.integer(x, kk, 1); }},
    {"shuffle", [&](const YAML::Node& x, const std::string& kk) { d.shuffle = p.boolean(x, kk); }},
    {"validation", [&](const YAML::Node& x, const std::string& kk) { parse_validation(p, x, kk, d); }},
  });
}

// The decoder's cross-key rules: what the tensor-parallel layers and the data need.
void check_decoder(const RunConfig& c) {
  const auto& a = c.decoder.arch;
  const std::int64_t tp = c.parallelism.tensor;
  const std::string& src = c.source;
  auto fail = [&](const std::string& what) { throw ConfigError(src + ": " + what); };
  auto n = [](std::int64_t v) { return std::to_string(v); };
  if (c.parallelism.domain != 1) {
    fail("parallelism.domain must be 1 for model.type decoder (a token sequence has no grid to split), got " +
         n(c.parallelism.domain));
  }
  if (a.d_model % a.n_heads != 0) {
    fail("model.d_model (" + n(a.d_model) + ") must be a multiple of model.n_heads (" + n(a.n_heads) + ")");
  }
  if (a.n_heads % tp != 0) {
    fail("model.n_heads (" + n(a.n_heads) + ") must be divisible by parallelism.tensor (" + n(tp) +
         "): attention heads are split over tp");
  }
  if (a.n_kv_heads != 0 && a.n_heads % a.n_kv_heads != 0) {
    fail("model.n_kv_heads (" + n(a.n_kv_heads) + ") must divide model.n_heads (" + n(a.n_heads) +
         "): each key/value head serves n_heads / n_kv_heads query heads");
  }
  if (a.rope && (a.d_model / a.n_heads) % 2 != 0) {
    fail("model.rope needs an even head dimension: model.d_model / model.n_heads is " + n(a.d_model / a.n_heads));
  }
  // hidden and (untied) vocab are split over tp, unevenly where they do not divide (the
  // first extent % tp ranks hold one more row); each rank needs at least one.
  if (a.hidden < tp) {
    fail("model.hidden (" + n(a.hidden) + ") must be at least parallelism.tensor (" + n(tp) +
         "): the MLP's hidden features are split over tp");
  }
  if (!a.tie_embeddings && a.vocab < tp) {
    fail("model.vocab (" + n(a.vocab) + ") must be at least parallelism.tensor (" + n(tp) +
         "): the output head is split over the vocabulary");
  }
  if (c.decoder.sequence_parallel && !a.tie_embeddings && c.decoder.seq_len % tp != 0) {
    fail("model.seq_len (" + n(c.decoder.seq_len) + ") must be divisible by parallelism.tensor (" + n(tp) +
         ") with model.sequence_parallel");
  }
  if (c.decoder.lora.rank > 0 && tp > 1 && c.decoder.sequence_parallel && !a.tie_embeddings) {
    fail("model.lora needs model.sequence_parallel: false at parallelism.tensor " + n(tp) +
         " (LoRA wraps no sequence-parallel layer)");
  }
  if (c.decoder.lora.rank > 0 && c.parallelism.pipeline > 1) {
    fail("model.lora is not supported with parallelism.pipeline > 1");
  }
  // A pipeline (docs/pipeline.md) keeps each stage's parameters whole over the stages,
  // and sends replicated activations between them.
  if (c.parallelism.pipeline > 1) {
    const std::string pp = "with parallelism.pipeline " + n(c.parallelism.pipeline);
    if (c.parallelism.data == DataParallelMode::fsdp2) fail("parallelism.data fsdp2 is not supported " + pp + " (use ddp)");
    if (a.n_layers + 3 < c.parallelism.pipeline) {
      fail("parallelism.pipeline (" + n(c.parallelism.pipeline) + ") exceeds the decoder's " + n(a.n_layers + 3) +
           " pipeline units (embed, model.n_layers blocks, norm, head)");
    }
  } else if (c.pipeline.microbatches != 0 || !c.pipeline.cut_points.empty()) {
    fail("pipeline.microbatches and pipeline.cut_points need parallelism.pipeline > 1");
  }
  if (c.data.source != "bytes" && !c.data.path.empty()) {
    fail("data.path is read only with data.source bytes (data.source is " + c.data.source + ")");
  }
  if (c.data.source == "bytes") {
    if (c.data.path.empty()) fail("data.path is needed with data.source bytes (the file whose bytes are the tokens)");
    if (a.vocab < 256) fail("model.vocab must be >= 256 with data.source bytes, got " + n(a.vocab));
  } else if (c.data.branching > a.vocab) {
    fail("data.branching (" + n(c.data.branching) + ") must not exceed model.vocab (" + n(a.vocab) + ")");
  }
}

}  // namespace tessera::train::detail
