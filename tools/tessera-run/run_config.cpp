#include "run_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <sstream>

#include "tessera/error.hpp"

namespace tessera::run {

std::string_view log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

namespace {

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  // "demo.yaml:7: data.batch_size"
  std::string where(const YAML::Node& node, const std::string& key) const {
    std::string s = source_;
    if (node.Mark().line >= 0) s += ":" + std::to_string(node.Mark().line + 1);
    return s + ": " + key;
  }

  using Handler = std::function<void(const YAML::Node&, const std::string&)>;

  // Runs the handler of every key of `section` (a mapping or null); an unknown key is
  // a ConfigError naming it and listing the known ones.
  void section(const YAML::Node& node, const std::string& name, const std::vector<std::pair<std::string, Handler>>& keys) {
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap()) throw ConfigError(where(node, name) + " must be a mapping");
    for (const auto& item : node) {
      const std::string key = item.first.IsScalar() ? item.first.Scalar() : "<non-scalar>";
      const std::string path = name + "." + key;
      bool found = false;
      for (const auto& [k, handler] : keys) {
        if (k == key) {
          handler(item.second, path);
          found = true;
          break;
        }
      }
      if (!found) {
        std::string known;
        for (const auto& [k, handler] : keys) known += (known.empty() ? "" : ", ") + k;
        throw ConfigError(where(item.first, path) + ": unknown key '" + key + "' (expected " + known + ")");
      }
    }
  }

  std::string string(const YAML::Node& v, const std::string& key) const {
    if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be a string");
    return v.Scalar();
  }
  std::int64_t integer(const YAML::Node& v, const std::string& key, std::int64_t min) const {
    if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min));
    const std::string& t = v.Scalar();
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || errno == ERANGE) {
      throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min) + ", got '" + t + "'");
    }
    if (x < min) throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min) + ", got " + t);
    return x;
  }
  double number(const YAML::Node& v, const std::string& key, double min, bool min_inclusive = true) const {
    if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be a number");
    const std::string& t = v.Scalar();
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || !std::isfinite(x)) {
      throw ConfigError(where(v, key) + " must be a finite number, got '" + t + "'");
    }
    if (min_inclusive ? x < min : x <= min) {
      throw ConfigError(where(v, key) + " must be " + (min_inclusive ? ">= " : "> ") + std::to_string(min) +
                        ", got " + t);
    }
    return x;
  }
  bool boolean(const YAML::Node& v, const std::string& key) const {
    if (v.IsScalar()) {
      const std::string& t = v.Scalar();
      if (t == "true" || t == "True" || t == "yes" || t == "on") return true;
      if (t == "false" || t == "False" || t == "no" || t == "off") return false;
    }
    throw ConfigError(where(v, key) + " must be true or false");
  }
  std::string choice(const YAML::Node& v, const std::string& key, const std::vector<std::string>& options) const {
    const std::string t = string(v, key);
    std::string list;
    for (const auto& o : options) {
      if (o == t) return t;
      list += (list.empty() ? "" : ", ") + o;
    }
    throw ConfigError(where(v, key) + ": unknown value '" + t + "' (expected " + list + ")");
  }
  std::vector<std::string> strings(const YAML::Node& v, const std::string& key) const {
    if (!v.IsSequence()) throw ConfigError(where(v, key) + " must be a list of names");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) out.push_back(string(v[i], key + "[" + std::to_string(i) + "]"));
    return out;
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, c)) parts.push_back(part);
  return parts;
}

// Applies "a.b.c=value" to the document (creating mappings on the way).
void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set '" + assignment + "': expected KEY=VALUE, e.g. --set schedule.steps=50");
  }
  const std::string key = assignment.substr(0, eq);
  const auto path = split(key, '.');
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + key + ": the value is not valid YAML: " + e.what());
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError("--set " + key + ": the config's top level is not a mapping");
  YAML::Node current = root;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (path[i].empty()) throw ConfigError("--set '" + assignment + "': empty key component");
    YAML::Node next = current[path[i]];
    if (!next.IsDefined() || next.IsNull()) {
      current[path[i]] = YAML::Node(YAML::NodeType::Map);
      next = current[path[i]];
    }
    if (!next.IsMap()) {
      throw ConfigError("--set " + key + ": '" + path[i] + "' is not a mapping in the config");
    }
    current.reset(next);  // (operator= would assign into the node)
  }
  current[path.back()] = value;
}

const std::vector<std::string> kModelTypes = {"field_emulator", "decoder"};

// data.validation: a number is the held-out fraction, anything else a file path (write
// ./0.5 for a file of that name).
void parse_validation(const Parser& p, const YAML::Node& v, const std::string& key, DataConfig& d) {
  d.validation_fraction = 0;
  d.validation_path.clear();
  if (v.IsNull()) return;
  const std::string t = p.string(v, key);
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (!t.empty() && *end == '\0') {
    if (!(x > 0 && x < 1)) {
      throw ConfigError(p.where(v, key) + " must be a fraction in (0, 1) of the data to hold out, or a file path; got " +
                        t);
    }
    d.validation_fraction = x;
    return;
  }
  if (t.empty()) throw ConfigError(p.where(v, key) + " must be a fraction in (0, 1) or a file path, got ''");
  d.validation_path = t;
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
  // sends replicated activations between them and recomputes forwards itself.
  if (c.parallelism.pipeline > 1) {
    const std::string pp = "with parallelism.pipeline " + n(c.parallelism.pipeline);
    if (a.tie_embeddings) fail("model.tie_embeddings must be false " + pp + " (the table would live on two stages)");
    if (c.parallelism.data == DataParallelMode::fsdp2) fail("parallelism.data fsdp2 is not supported " + pp + " (use ddp)");
    if (c.activation_checkpointing.enabled()) {
      fail("model.activation_checkpointing must be none " + pp + " (the pipeline recomputes each stage's forward)");
    }
    if (c.data.has_validation()) fail("data.validation is not supported " + pp + " (evaluation runs no pipeline yet)");
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

}  // namespace

RunConfig parse_run_config_text(const std::string& text, const std::string& source,
                                const std::vector<std::string>& overrides) {
  RunConfig c;
  c.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": invalid YAML: " + e.what());
  }
  // Before the overrides: a duplicate is the file's mistake, and its lines are the file's.
  check_unique_yaml_keys(text, source);
  c.text = text;
  if (!overrides.empty()) {
    for (const auto& o : overrides) apply_override(root, o);
    YAML::Emitter out;
    out << root;
    c.text = std::string(out.c_str()) + "\n";
    c.source = source + " (with --set overrides)";
    root = YAML::Load(c.text);
  }
  Parser p(c.source);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError(c.source + ": the top level must be a mapping");

  // The parallelism block (bare or under trainer:) is parsed by the library's own parser,
  // which rejects its unknown keys and bad values with the same messages as mesh_info.
  c.parallelism = ParallelismConfig::from_yaml_string(c.text, c.source);

  // model.type decides which keys the model and data sections take, so it is read
  // first, wherever it stands in the file (const lookups insert nothing).
  {
    const YAML::Node croot = root;
    const YAML::Node model = croot["model"];
    if (model.IsDefined() && model.IsMap()) {
      const YAML::Node type = model["type"];
      if (type.IsDefined() && !type.IsNull()) c.model_type = p.choice(type, "model.type", kModelTypes);
    }
  }
  if (c.model_type == "decoder") c.data.path.clear();  // the decoder's default source needs no file

  using H = Parser::Handler;
  auto& m = c.model;
  auto& d = c.data;
  auto& o = c.optimizer;
  auto& s = c.schedule;
  auto& k = c.checkpoint;
  std::vector<std::pair<std::string, H>> top = {
      {"parallelism", [](const YAML::Node&, const std::string&) {}},
      {"trainer", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {{"parallelism", [](const YAML::Node&, const std::string&) {}}});
       }},
      {"model", [&](const YAML::Node& v, const std::string& key) {
         if (c.model_type == "decoder") {
           auto& dm = c.decoder;
           p.section(v, key, {
             {"type", [&](const YAML::Node& x, const std::string& kk) { p.choice(x, kk, kModelTypes); }},
             {"vocab", [&](const YAML::Node& x, const std::string& kk) { dm.arch.vocab = p.integer(x, kk, 2); }},
             {"d_model", [&](const YAML::Node& x, const std::string& kk) { dm.arch.d_model = p.integer(x, kk, 1); }},
             {"n_heads", [&](const YAML::Node& x, const std::string& kk) { dm.arch.n_heads = p.integer(x, kk, 1); }},
             {"hidden", [&](const YAML::Node& x, const std::string& kk) { dm.arch.hidden = p.integer(x, kk, 1); }},
             {"n_layers", [&](const YAML::Node& x, const std::string& kk) { dm.arch.n_layers = p.integer(x, kk, 0); }},
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
           return;
         }
         p.section(v, key, {
           {"type", [&](const YAML::Node& x, const std::string& kk) { p.choice(x, kk, kModelTypes); }},
           {"width", [&](const YAML::Node& x, const std::string& kk) { m.width = p.integer(x, kk, 1); }},
           {"mlp_hidden", [&](const YAML::Node& x, const std::string& kk) { m.mlp_hidden = p.integer(x, kk, 1); }},
           {"blocks", [&](const YAML::Node& x, const std::string& kk) { m.n_blocks = p.integer(x, kk, 0); }},
           {"kernel", [&](const YAML::Node& x, const std::string& kk) {
              m.kernel = static_cast<int>(p.integer(x, kk, 1));
              if (m.kernel > 15) throw ConfigError(p.where(x, kk) + " must be <= 15, got " + x.Scalar());
            }},
           {"residual", [&](const YAML::Node& x, const std::string& kk) { m.residual = p.boolean(x, kk); }},
           {"pole", [&](const YAML::Node& x, const std::string& kk) {
              m.pole = models::parse_pole_policy(p.string(x, kk), p.where(x, kk));
            }},
           {"activation_checkpointing", [&](const YAML::Node& x, const std::string& kk) {
              c.activation_checkpointing = nn::CheckpointPolicy::parse(p.string(x, kk), p.where(x, kk));
            }},
         });
       }},
      {"data", [&](const YAML::Node& v, const std::string& key) {
         if (c.model_type == "decoder") {
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
           return;
         }
         p.section(v, key, {
           {"path", [&](const YAML::Node& x, const std::string& kk) {
              d.path_list = x.IsSequence() ? p.strings(x, kk) : std::vector<std::string>{};
              if (x.IsSequence() && d.path_list.empty()) throw ConfigError(p.where(x, kk) + " lists no file");
              d.path = x.IsSequence() ? d.path_list.front() : p.string(x, kk);
            }},
           {"dataset", [&](const YAML::Node& x, const std::string& kk) { d.dataset = p.string(x, kk); }},
           {"variables", [&](const YAML::Node& x, const std::string& kk) { d.variables = p.strings(x, kk); }},
           {"batch_size", [&](const YAML::Node& x, const std::string& kk) { d.batch_size = p.integer(x, kk, 1); }},
           {"lead", [&](const YAML::Node& x, const std::string& kk) { d.lead = p.integer(x, kk, 1); }},
           {"normalize", [&](const YAML::Node& x, const std::string& kk) { d.normalize = p.boolean(x, kk); }},
           {"shuffle", [&](const YAML::Node& x, const std::string& kk) { d.shuffle = p.boolean(x, kk); }},
           {"validation", [&](const YAML::Node& x, const std::string& kk) { parse_validation(p, x, kk, d); }},
           {"format", [&](const YAML::Node& x, const std::string& kk) {
              d.format = p.choice(x, kk, {"auto", "tessera", "netcdf"});
            }},
           {"stats", [&](const YAML::Node& x, const std::string& kk) { d.stats = x.IsNull() ? "" : p.string(x, kk); }},
         });
       }},
      {"optimizer", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {
           {"type", [&](const YAML::Node& x, const std::string& kk) { o.type = p.choice(x, kk, {"adamw", "sgd"}); }},
           {"lr", [&](const YAML::Node& x, const std::string& kk) { o.lr = p.number(x, kk, 0.0, false); }},
           {"weight_decay", [&](const YAML::Node& x, const std::string& kk) { o.weight_decay = p.number(x, kk, 0.0); }},
           {"beta1", [&](const YAML::Node& x, const std::string& kk) { o.beta1 = p.number(x, kk, 0.0); }},
           {"beta2", [&](const YAML::Node& x, const std::string& kk) { o.beta2 = p.number(x, kk, 0.0); }},
           {"eps", [&](const YAML::Node& x, const std::string& kk) { o.eps = p.number(x, kk, 0.0); }},
           {"momentum", [&](const YAML::Node& x, const std::string& kk) { o.momentum = p.number(x, kk, 0.0); }},
           {"clip_grad_norm", [&](const YAML::Node& x, const std::string& kk) { o.clip_grad_norm = p.number(x, kk, 0.0); }},
           {"warmup_steps", [&](const YAML::Node& x, const std::string& kk) { o.warmup_steps = p.integer(x, kk, 0); }},
           {"lr_schedule", [&](const YAML::Node& x, const std::string& kk) {
              o.lr_schedule = p.choice(x, kk, {"constant", "cosine"});
            }},
           {"min_lr", [&](const YAML::Node& x, const std::string& kk) { o.min_lr = p.number(x, kk, 0.0); }},
           {"accumulate", [&](const YAML::Node& x, const std::string& kk) { o.accumulate = p.integer(x, kk, 1); }},
         });
         const auto check_beta = [&](double b, const char* name) {
           if (b >= 1.0) throw ConfigError(p.where(v, key + "." + name) + " must be in [0, 1), got " + std::to_string(b));
         };
         check_beta(o.beta1, "beta1");
         check_beta(o.beta2, "beta2");
       }},
      {"schedule", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {
           {"steps", [&](const YAML::Node& x, const std::string& kk) { s.steps = p.integer(x, kk, 1); }},
           {"log_every", [&](const YAML::Node& x, const std::string& kk) { s.log_every = p.integer(x, kk, 1); }},
           {"eval_every", [&](const YAML::Node& x, const std::string& kk) { s.eval_every = p.integer(x, kk, 0); }},
           {"seed", [&](const YAML::Node& x, const std::string& kk) {
              s.seed = static_cast<std::uint64_t>(p.integer(x, kk, 0));
            }},
         });
       }},
      {"checkpoint", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {
           {"dir", [&](const YAML::Node& x, const std::string& kk) { k.dir = x.IsNull() ? "" : p.string(x, kk); }},
           {"layout", [&](const YAML::Node& x, const std::string& kk) {
              k.layout = io::parse_checkpoint_layout(p.choice(x, kk, {"per_rank", "shared"}));
            }},
           {"interval", [&](const YAML::Node& x, const std::string& kk) { k.interval = p.integer(x, kk, 0); }},
           {"keep_last", [&](const YAML::Node& x, const std::string& kk) {
              k.keep_last = static_cast<int>(p.integer(x, kk, 0));
            }},
         });
       }},
      {"device", [&](const YAML::Node& v, const std::string& key) {
         c.device = p.choice(v, key, {"auto", "host", "cuda"});
       }},
      {"resume", [&](const YAML::Node& v, const std::string& key) {
         c.resume = v.IsNull() ? "" : p.string(v, key);
       }},
      {"init_weights", [&](const YAML::Node& v, const std::string& key) {
         c.init_weights = v.IsNull() ? "" : p.string(v, key);
       }},
      {"collective_timeout", [&](const YAML::Node& v, const std::string& key) {
         c.collective_timeout = p.number(v, key, 0.0);
       }},
      {"predict", [&](const YAML::Node& v, const std::string& key) {
         auto& pr = c.predict;
         p.section(v, key, {
           {"checkpoint", [&](const YAML::Node& x, const std::string& kk) {
              pr.checkpoint = x.IsNull() ? "" : p.string(x, kk);
            }},
           {"initial_time", [&](const YAML::Node& x, const std::string& kk) { pr.initial_time = p.integer(x, kk, 0); }},
           {"steps", [&](const YAML::Node& x, const std::string& kk) { pr.steps = p.integer(x, kk, 1); }},
           {"output", [&](const YAML::Node& x, const std::string& kk) { pr.output = p.string(x, kk); }},
           {"log_every", [&](const YAML::Node& x, const std::string& kk) { pr.log_every = p.integer(x, kk, 1); }},
         });
       }},
      {"pipeline", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {
           {"microbatches", [&](const YAML::Node& x, const std::string& kk) {
              c.pipeline.microbatches = p.integer(x, kk, 1);
            }},
           {"schedule", [&](const YAML::Node& x, const std::string& kk) {
              c.pipeline.schedule = p.choice(x, kk, {"gpipe", "1f1b"});
            }},
           {"cut_points", [&](const YAML::Node& x, const std::string& kk) { c.pipeline.cut_points = p.strings(x, kk); }},
         });
       }},
      {"logging", [&](const YAML::Node& v, const std::string& key) {
         p.section(v, key, {
           {"level", [&](const YAML::Node& x, const std::string& kk) {
              const std::string t = p.choice(x, kk, {"error", "warn", "info", "debug"});
              for (auto l : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
                if (t == log_level_name(l)) c.log_level = l;
              }
            }},
           {"metrics_file", [&](const YAML::Node& x, const std::string& kk) {
              c.metrics_file = x.IsNull() ? "" : p.string(x, kk);
            }},
         });
       }},
  };
  for (const auto& item : root) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : "<non-scalar>";
    bool found = false;
    for (const auto& [name, handler] : top) {
      if (name == key) {
        handler(item.second, key);
        found = true;
        break;
      }
    }
    if (!found) {
      throw ConfigError(p.where(item.first, key) +
                        ": unknown key '" + key +
                        "' (expected parallelism, trainer, model, data, optimizer, schedule, checkpoint, device, "
                        "collective_timeout, "
                        "resume, init_weights, logging, predict, pipeline)");
    }
  }

  // Cross-key rules that need no data and no MPI.
  if (c.parallelism.pipeline > 1 && c.model_type != "decoder") {
    throw ConfigError(c.source + ": parallelism.pipeline (" + std::to_string(c.parallelism.pipeline) +
                      ") > 1 is supported for model.type decoder only (model.type is " + c.model_type + ")");
  }
  if (c.model_type == "decoder") {
    check_decoder(c);
  } else if (c.model.mlp_hidden % c.parallelism.tensor != 0) {
    throw ConfigError(c.source + ": model.mlp_hidden (" + std::to_string(c.model.mlp_hidden) +
                      ") must be divisible by parallelism.tensor (" + std::to_string(c.parallelism.tensor) + ")");
  }
  if (c.optimizer.min_lr > c.optimizer.lr) {
    throw ConfigError(c.source + ": optimizer.min_lr (" + std::to_string(c.optimizer.min_lr) +
                      ") must not exceed optimizer.lr (" + std::to_string(c.optimizer.lr) + ")");
  }
  if (c.schedule.eval_every > 0 && !c.data.has_validation()) {
    throw ConfigError(c.source + ": schedule.eval_every (" + std::to_string(c.schedule.eval_every) +
                      ") needs validation data: set data.validation to a fraction in (0, 1) to hold out, or a file");
  }
  if (c.model_type == "decoder" && !c.data.validation_path.empty() && c.data.source != "bytes") {
    throw ConfigError(c.source + ": data.validation names a file ('" + c.data.validation_path +
                      "'), whose bytes are tokens only with data.source bytes (data.source is " + c.data.source +
                      "); use a fraction in (0, 1) to hold out part of the synthetic corpus");
  }
  if ((c.resume == "latest" || c.resume == "latest_or_start") && c.checkpoint.dir.empty()) {
    throw ConfigError(c.source + ": resume: " + c.resume +
                      " needs checkpoint.dir (the directory whose latest step to load)");
  }
  return c;
}

RunConfig parse_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read config file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_run_config_text(text.str(), path, overrides);
}

double learning_rate_at(const OptimizerConfig& c, std::int64_t step, std::int64_t total) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  if (c.lr_schedule == "cosine") {
    const double span = static_cast<double>(std::max<std::int64_t>(1, total - c.warmup_steps));
    const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
    return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return c.lr;
}

}  // namespace tessera::run
