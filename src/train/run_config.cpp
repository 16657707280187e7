#include "tessera/train/run_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <sstream>

#include "config_parser.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::train {

using detail::kModelTypes;
using detail::Parser;

constexpr tessera::detail::EnumName<LogLevel> kLogLevelNames[] = {
    {LogLevel::error, "error"},
    {LogLevel::warn, "warn"},
    {LogLevel::info, "info"},
    {LogLevel::debug, "debug"},
};

std::string_view log_level_name(LogLevel level) noexcept { return tessera::detail::name_of(kLogLevelNames, level); }

namespace {

using H = Parser::Handler;
using X = const YAML::Node&;
using K = const std::string&;

// The document with the --set overrides applied (their text then becomes the config's
// text and the source says so); an empty document is an empty mapping.
YAML::Node load_document(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides, RunConfig& c) {
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
    for (const auto& o : overrides) detail::apply_override(root, o);
    YAML::Emitter out;
    out << root;
    c.text = std::string(out.c_str()) + "\n";
    c.source = source + " (with --set overrides)";
    root = YAML::Load(c.text);
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError(c.source + ": the top level must be a mapping");
  return root;
}

// model.type decides which keys the model and data sections take, so it is read
// first, wherever it stands in the file (const lookups insert nothing).
void read_model_type(const YAML::Node& croot, const Parser& p, RunConfig& c) {
  const YAML::Node model = croot["model"];
  if (model.IsDefined() && model.IsMap()) {
    const YAML::Node type = model["type"];
    if (type.IsDefined() && !type.IsNull()) c.model_type = p.choice(type, "model.type", kModelTypes);
  }
}

// model: of the field emulator (the decoder's: decoder_config.cpp).
void parse_field_model(const Parser& p, X v, K key, RunConfig& c) {
  auto& m = c.model;
  p.section(v, key, {
    {"type", [&](X x, K kk) { p.choice(x, kk, kModelTypes); }},
    {"width", [&](X x, K kk) { m.width = p.integer(x, kk, 1); }},
    {"mlp_hidden", [&](X x, K kk) { m.mlp_hidden = p.integer(x, kk, 1); }},
    {"blocks", [&](X x, K kk) { m.n_blocks = p.integer(x, kk, 0); }},
    {"kernel", [&](X x, K kk) {
       m.kernel = static_cast<int>(p.integer(x, kk, 1));
       if (m.kernel > 15) throw ConfigError(p.where(x, kk) + " must be <= 15, got " + x.Scalar());
     }},
    {"residual", [&](X x, K kk) { m.residual = p.boolean(x, kk); }},
    {"pole", [&](X x, K kk) { m.pole = models::parse_pole_policy(p.string(x, kk), p.where(x, kk)); }},
    {"activation_checkpointing", [&](X x, K kk) {
       c.activation_checkpointing = nn::CheckpointPolicy::parse(p.string(x, kk), p.where(x, kk));
     }},
  });
}

// data: of the field emulator (the decoder's: decoder_config.cpp).
void parse_field_data(const Parser& p, X v, K key, DataConfig& d) {
  p.section(v, key, {
    {"path", [&](X x, K kk) {
       d.path_list = x.IsSequence() ? p.strings(x, kk) : std::vector<std::string>{};
       if (x.IsSequence() && d.path_list.empty()) throw ConfigError(p.where(x, kk) + " lists no file");
       d.path = x.IsSequence() ? d.path_list.front() : p.string(x, kk);
     }},
    {"dataset", [&](X x, K kk) { d.dataset = p.string(x, kk); }},
    {"variables", [&](X x, K kk) { d.variables = p.strings(x, kk); }},
    {"batch_size", [&](X x, K kk) { d.batch_size = p.integer(x, kk, 1); }},
    {"lead", [&](X x, K kk) { d.lead = p.integer(x, kk, 1); }},
    {"normalize", [&](X x, K kk) { d.normalize = p.boolean(x, kk); }},
    {"shuffle", [&](X x, K kk) { d.shuffle = p.boolean(x, kk); }},
    {"validation", [&](X x, K kk) { detail::parse_validation(p, x, kk, d); }},
    {"format", [&](X x, K kk) { d.format = p.choice(x, kk, {"auto", "tessera", "netcdf"}); }},
    {"stats", [&](X x, K kk) { d.stats = x.IsNull() ? "" : p.string(x, kk); }},
  });
}

void parse_optimizer(const Parser& p, X v, K key, OptimizerConfig& o) {
  p.section(v, key, {
    {"type", [&](X x, K kk) { o.type = p.choice(x, kk, {"adamw", "sgd"}); }},
    {"lr", [&](X x, K kk) { o.lr = p.number(x, kk, 0.0, false); }},
    {"weight_decay", [&](X x, K kk) { o.weight_decay = p.number(x, kk, 0.0); }},
    {"beta1", [&](X x, K kk) { o.beta1 = p.number(x, kk, 0.0); }},
    {"beta2", [&](X x, K kk) { o.beta2 = p.number(x, kk, 0.0); }},
    {"eps", [&](X x, K kk) { o.eps = p.number(x, kk, 0.0); }},
    {"momentum", [&](X x, K kk) { o.momentum = p.number(x, kk, 0.0); }},
    {"clip_grad_norm", [&](X x, K kk) { o.clip_grad_norm = p.number(x, kk, 0.0); }},
    {"warmup_steps", [&](X x, K kk) { o.warmup_steps = p.integer(x, kk, 0); }},
    {"lr_schedule", [&](X x, K kk) { o.lr_schedule = p.choice(x, kk, {"constant", "cosine"}); }},
    {"min_lr", [&](X x, K kk) { o.min_lr = p.number(x, kk, 0.0); }},
    {"accumulate", [&](X x, K kk) { o.accumulate = p.integer(x, kk, 1); }},
    {"reduce_dtype", [&](X x, K kk) {
       o.reduce_dtype = p.choice(x, kk, {"fp32", "bf16"}) == "bf16" ? DType::bf16 : DType::f32;
     }},
  });
  const auto check_beta = [&](double b, const char* name) {
    if (b >= 1.0) throw ConfigError(p.where(v, key + "." + name) + " must be in [0, 1), got " + std::to_string(b));
  };
  check_beta(o.beta1, "beta1");
  check_beta(o.beta2, "beta2");
}

void parse_schedule(const Parser& p, X v, K key, ScheduleConfig& s) {
  p.section(v, key, {
    {"steps", [&](X x, K kk) { s.steps = p.integer(x, kk, 1); }},
    {"log_every", [&](X x, K kk) { s.log_every = p.integer(x, kk, 1); }},
    {"eval_every", [&](X x, K kk) { s.eval_every = p.integer(x, kk, 0); }},
    {"seed", [&](X x, K kk) { s.seed = static_cast<std::uint64_t>(p.integer(x, kk, 0)); }},
  });
}

void parse_checkpoint(const Parser& p, X v, K key, CheckpointConfig& k) {
  p.section(v, key, {
    {"dir", [&](X x, K kk) { k.dir = x.IsNull() ? "" : p.string(x, kk); }},
    {"layout", [&](X x, K kk) { k.layout = io::parse_checkpoint_layout(p.choice(x, kk, {"per_rank", "shared"})); }},
    {"interval", [&](X x, K kk) { k.interval = p.integer(x, kk, 0); }},
    {"keep_last", [&](X x, K kk) { k.keep_last = static_cast<int>(p.integer(x, kk, 0)); }},
    {"async", [&](X x, K kk) { k.async = p.boolean(x, kk); }},
  });
}

void parse_predict(const Parser& p, X v, K key, PredictConfig& pr) {
  p.section(v, key, {
    {"checkpoint", [&](X x, K kk) { pr.checkpoint = x.IsNull() ? "" : p.string(x, kk); }},
    {"initial_time", [&](X x, K kk) { pr.initial_time = p.integer(x, kk, 0); }},
    {"steps", [&](X x, K kk) { pr.steps = p.integer(x, kk, 1); }},
    {"output", [&](X x, K kk) { pr.output = p.string(x, kk); }},
    {"log_every", [&](X x, K kk) { pr.log_every = p.integer(x, kk, 1); }},
  });
}

void parse_pipeline(const Parser& p, X v, K key, PipelineRunConfig& pl) {
  p.section(v, key, {
    {"microbatches", [&](X x, K kk) { pl.microbatches = p.integer(x, kk, 1); }},
    {"schedule", [&](X x, K kk) { pl.schedule = p.choice(x, kk, {"gpipe", "1f1b"}); }},
    {"cut_points", [&](X x, K kk) { pl.cut_points = p.strings(x, kk); }},
    {"activations", [&](X x, K kk) { pl.activations = p.choice(x, kk, {"stash", "recompute"}); }},
  });
}

void parse_logging(const Parser& p, X v, K key, RunConfig& c) {
  p.section(v, key, {
    {"level", [&](X x, K kk) {
       c.log_level = tessera::detail::parse_enum(kLogLevelNames, p.choice(x, kk, {"error", "warn", "info", "debug"}),
                                                 kk, "log level");
     }},
    {"metrics_file", [&](X x, K kk) { c.metrics_file = x.IsNull() ? "" : p.string(x, kk); }},
  });
}

// The top-level keys and their handlers, in the order the unknown-key message lists them
// (parallelism is parsed by the library's own parser before).
Parser::Keys top_level_keys(const Parser& p, RunConfig& c) {
  return {
      {"parallelism", [](X, K) {}},
      {"trainer", [&](X v, K key) { p.section(v, key, {{"parallelism", [](X, K) {}}}); }},
      {"model", [&](X v, K key) {
         if (c.model_type == "decoder") return detail::parse_decoder_model(p, v, key, c);
         if (c.model_type == "onnx") return detail::parse_onnx_model(p, v, key, c);
         parse_field_model(p, v, key, c);
       }},
      {"data", [&](X v, K key) {
         if (c.model_type == "decoder") return detail::parse_decoder_data(p, v, key, c.data);
         parse_field_data(p, v, key, c.data);
       }},
      {"optimizer", [&](X v, K key) { parse_optimizer(p, v, key, c.optimizer); }},
      {"schedule", [&](X v, K key) { parse_schedule(p, v, key, c.schedule); }},
      {"checkpoint", [&](X v, K key) { parse_checkpoint(p, v, key, c.checkpoint); }},
      {"device", [&](X v, K key) { c.device = p.choice(v, key, {"auto", "host", "cuda"}); }},
      {"precision", [&](X v, K key) {
         c.precision = parse_precision(p.choice(v, key, {"fp32", "bf16-mixed"}), key);
       }},
      {"resume", [&](X v, K key) { c.resume = v.IsNull() ? "" : p.string(v, key); }},
      {"init_weights", [&](X v, K key) { c.init_weights = v.IsNull() ? "" : p.string(v, key); }},
      {"collective_timeout", [&](X v, K key) { c.collective_timeout = p.number(v, key, 0.0); }},
      {"predict", [&](X v, K key) { parse_predict(p, v, key, c.predict); }},
      {"pipeline", [&](X v, K key) { parse_pipeline(p, v, key, c.pipeline); }},
      {"logging", [&](X v, K key) { parse_logging(p, v, key, c); }},
  };
}

// Each top-level key of the file, in the file's order, through its handler.
void parse_top_level(const YAML::Node& root, const Parser& p, const Parser::Keys& keys) {
  for (const auto& item : root) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : "<non-scalar>";
    const auto handler = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; });
    if (handler == keys.end()) {
      throw ConfigError(p.where(item.first, key) +
                        ": unknown key '" + key +
                        "' (expected parallelism, trainer, model, data, optimizer, schedule, checkpoint, device, "
                        "precision, collective_timeout, "
                        "resume, init_weights, logging, predict, pipeline)");
    }
    handler->second(item.second, key);
  }
}

// Cross-key rules that need no data and no MPI.
void check_cross_keys(const RunConfig& c) {
  if (c.parallelism.pipeline > 1 && c.model_type != "decoder") {
    throw ConfigError(c.source + ": parallelism.pipeline (" + std::to_string(c.parallelism.pipeline) +
                      ") > 1 is supported for model.type decoder only (model.type is " + c.model_type + ")");
  }
  if (c.model_type == "decoder") {
    detail::check_decoder(c);
  } else if (c.model_type == "onnx") {
    detail::check_onnx(c);
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
}

}  // namespace

RunConfig parse_run_config_text(const std::string& text, const std::string& source,
                                const std::vector<std::string>& overrides) {
  RunConfig c;
  c.source = source;
  const YAML::Node root = load_document(text, source, overrides, c);
  const Parser p(c.source);
  // The parallelism block (bare or under trainer:) is parsed by the library's own parser,
  // which rejects its unknown keys and bad values with the same messages as mesh_info.
  c.parallelism = ParallelismConfig::from_yaml_string(c.text, c.source);
  read_model_type(root, p, c);
  if (c.model_type == "decoder") c.data.path.clear();  // the decoder's default source needs no file
  parse_top_level(root, p, top_level_keys(p, c));
  check_cross_keys(c);
  return c;
}

RunConfig parse_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_config_text(tessera::detail::read_regular_file(path, "config file"), path, overrides);
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

}  // namespace tessera::train
