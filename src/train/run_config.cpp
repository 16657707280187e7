#include "tessera/train/run_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <sstream>

#include "config_parser.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/parallelism.hpp"

namespace tessera::train {

using detail::kModelTypes;
using detail::Parser;

std::string_view log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

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
    for (const auto& o : overrides) detail::apply_override(root, o);
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
         if (c.model_type == "decoder") return detail::parse_decoder_model(p, v, key, c);
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
         if (c.model_type == "decoder") return detail::parse_decoder_data(p, v, key, d);
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
           {"validation", [&](const YAML::Node& x, const std::string& kk) { detail::parse_validation(p, x, kk, d); }},
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
           {"reduce_dtype", [&](const YAML::Node& x, const std::string& kk) {
              o.reduce_dtype = p.choice(x, kk, {"fp32", "bf16"}) == "bf16" ? DType::bf16 : DType::f32;
            }},
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
      {"precision", [&](const YAML::Node& v, const std::string& key) {
         c.precision = parse_precision(p.choice(v, key, {"fp32", "bf16-mixed"}), key);
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
           {"activations", [&](const YAML::Node& x, const std::string& kk) {
              c.pipeline.activations = p.choice(x, kk, {"stash", "recompute"});
            }},
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
                        "precision, collective_timeout, "
                        "resume, init_weights, logging, predict, pipeline)");
    }
  }

  // Cross-key rules that need no data and no MPI.
  if (c.parallelism.pipeline > 1 && c.model_type != "decoder") {
    throw ConfigError(c.source + ": parallelism.pipeline (" + std::to_string(c.parallelism.pipeline) +
                      ") > 1 is supported for model.type decoder only (model.type is " + c.model_type + ")");
  }
  if (c.model_type == "decoder") {
    detail::check_decoder(c);
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
