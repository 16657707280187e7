// tessera-ckpt import-hf / export-hf: Hugging Face model directories (config.json plus
// model.safetensors, or shards with model.safetensors.index.json) of the Llama family,
// in and out of tessera decoder checkpoints (docs/pytorch.md, "Hugging Face model
// directories"). The weights go through the built-in Llama mapping, which converts the
// rotary pairing (rope_permute, io/weight_mapping.hpp); the decoder description comes
// from config.json, and every key tessera's decoder cannot express is refused by name.

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "convert.hpp"
#include "io/json.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/ops.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/models/load_model.hpp"

namespace tessera::ckpt {

namespace {

namespace fs = std::filesystem;
using io::detail::JsonValue;

// The architectures import-hf takes: the same weights, names and computation as Llama.
const std::map<std::string, std::string> kArchitectures = {
    {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}};

struct Arguments {
  std::vector<std::string> paths;
  std::map<std::string, std::string> flags;
};

Arguments parse(const std::vector<std::string>& args, const std::vector<std::string>& known, const std::string& command,
                std::size_t n_paths) {
  Arguments a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) {
      a.paths.push_back(args[i]);
      continue;
    }
    std::string name = args[i], value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= args.size()) throw InvalidArgument(command + ": " + name + " needs a value");
      value = args[++i];
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InvalidArgument(command + ": unknown option " + name + (list.empty() ? "" : " (expected " + list + ")"));
    }
    if (!a.flags.emplace(name, value).second) throw InvalidArgument(command + ": " + name + " is given twice");
  }
  if (a.paths.size() != n_paths) {
    throw InvalidArgument(command + ": expected " + std::to_string(n_paths) + " paths, got " +
                          std::to_string(a.paths.size()));
  }
  return a;
}

// ---- config.json

struct HfConfig {
  models::DecoderConfig decoder;
  std::string architecture;
  std::int64_t max_position_embeddings = 0;  // 0: not given
};

class ConfigReader {
 public:
  ConfigReader(const JsonValue& root, std::string path) : root_(root), path_(std::move(path)) {}

  const JsonValue* get(const char* key) const {
    const JsonValue* v = root_.member(key);
    return v == nullptr || v->kind == JsonValue::Kind::null ? nullptr : v;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError("import-hf: " + path_ + ": `" + key + "` " + what);
  }
  std::int64_t integer(const char* key, std::int64_t min, std::optional<std::int64_t> fallback = std::nullopt) const {
    const JsonValue* v = get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      fail(key, "is missing (tessera's decoder needs it)");
    }
    std::uint64_t u = 0;
    if (v->kind != JsonValue::Kind::number || !io::detail::json_uint64(*v, u) ||
        u > static_cast<std::uint64_t>(INT64_MAX) || static_cast<std::int64_t>(u) < min) {
      fail(key, "must be an integer >= " + std::to_string(min) + ", got " + describe(*v));
    }
    return static_cast<std::int64_t>(u);
  }
  double number(const char* key, double fallback) const {
    const JsonValue* v = get(key);
    if (v == nullptr) return fallback;
    double x = 0;
    try {
      if (v->kind != JsonValue::Kind::number) throw std::invalid_argument("");
      x = std::stod(v->text);
    } catch (const std::exception&) {
      fail(key, "must be a number, got " + describe(*v));
    }
    if (!(x > 0) || !std::isfinite(x)) fail(key, "must be a finite number > 0, got " + v->text);
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    const JsonValue* v = get(key);
    if (v == nullptr) return fallback;
    if (v->kind != JsonValue::Kind::boolean) fail(key, "must be true or false, got " + describe(*v));
    return v->boolean;
  }
  static std::string describe(const JsonValue& v) {
    if (v.kind == JsonValue::Kind::string) return "\"" + v.text + "\"";
    if (v.kind == JsonValue::Kind::number) return v.text;
    if (v.kind == JsonValue::Kind::boolean) return v.boolean ? "true" : "false";
    return std::string("a JSON ") + std::string(v.kind_name());
  }

 private:
  const JsonValue& root_;
  std::string path_;
};

HfConfig read_config(const std::string& path) {
  const std::string text = tessera::detail::read_regular_file(path, "config.json");
  const JsonValue root = io::detail::parse_json(text, path);
  if (root.kind != JsonValue::Kind::object) throw ConfigError("import-hf: " + path + " is not a JSON object");
  const ConfigReader c(root, path);
  HfConfig out;
  const JsonValue* arch = c.get("architectures");
  if (arch == nullptr || arch->kind != JsonValue::Kind::array || arch->items.size() != 1 ||
      arch->items[0].kind != JsonValue::Kind::string) {
    c.fail("architectures", "must list one architecture (LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM)");
  }
  out.architecture = arch->items[0].text;
  if (!kArchitectures.count(out.architecture)) {
    c.fail("architectures", "is \"" + out.architecture +
                                "\", which tessera's decoder cannot express (it takes LlamaForCausalLM and the same "
                                "layout as MistralForCausalLM or Qwen2ForCausalLM)");
  }
  // What the decoder has no counterpart for: refused by name, never dropped silently.
  if (const JsonValue* act = c.get("hidden_act"); act != nullptr && !(act->kind == JsonValue::Kind::string &&
                                                                       act->text == "silu")) {
    c.fail("hidden_act", "is " + ConfigReader::describe(*act) + "; tessera's decoder has SwiGLU (silu) only");
  }
  if (c.get("rope_scaling") != nullptr) {
    c.fail("rope_scaling", "is set; tessera's RoPE has no scaling (only rope_theta)");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (c.boolean(bias, false)) c.fail(bias, "is true; tessera's decoder projections have no bias");
  }
  if (c.get("sliding_window") != nullptr && c.boolean("use_sliding_window", true)) {
    c.fail("sliding_window", "is " + ConfigReader::describe(*c.get("sliding_window")) +
                                 "; tessera's attention is full causal attention (no sliding window)");
  }
  models::DecoderConfig& d = out.decoder;
  d.vocab = c.integer("vocab_size", 2);
  d.d_model = c.integer("hidden_size", 1);
  d.n_heads = c.integer("num_attention_heads", 1);
  d.n_kv_heads = c.integer("num_key_value_heads", 1, d.n_heads);
  d.hidden = c.integer("intermediate_size", 1);
  d.n_layers = c.integer("num_hidden_layers", 1);
  d.eps = c.number("rms_norm_eps", 1e-6);
  d.rope = true;
  d.rope_theta = c.number("rope_theta", 10000.0);
  d.tie_embeddings = c.boolean("tie_word_embeddings", false);
  if (d.d_model % d.n_heads != 0) {
    c.fail("hidden_size", "(" + std::to_string(d.d_model) + ") must be a multiple of num_attention_heads (" +
                              std::to_string(d.n_heads) + ")");
  }
  if (const JsonValue* hd = c.get("head_dim"); hd != nullptr && c.integer("head_dim", 1) != d.d_model / d.n_heads) {
    c.fail("head_dim", "is " + hd->text + ", not hidden_size / num_attention_heads (" +
                           std::to_string(d.d_model / d.n_heads) + "); tessera's heads are d_model / n_heads wide");
  }
  if (d.n_heads % d.n_kv_heads != 0) {
    c.fail("num_key_value_heads", "(" + std::to_string(d.n_kv_heads) + ") must divide num_attention_heads (" +
                                      std::to_string(d.n_heads) + ")");
  }
  if ((d.d_model / d.n_heads) % 2 != 0) c.fail("hidden_size", "/ num_attention_heads must be even for RoPE");
  if (d.n_kv_heads == d.n_heads) d.n_kv_heads = 0;  // plain multi-head attention, as tessera-run writes it
  out.max_position_embeddings = c.integer("max_position_embeddings", 1, 0);
  return out;
}

// The built-in mapping of the Llama layout: Hugging Face's names, the rotary pairing of
// q and k converted per head; a tied model's lm_head (when a file holds one) left out.
std::string llama_mapping(const models::DecoderConfig& d) {
  const std::string p = "model.layers.*.";
  std::string m = "tensors:\n  embed.weight: model.embed_tokens.weight\n"
                  "  layers.*.attn_norm.weight: " + p + "input_layernorm.weight\n"
                  "  layers.*.attn.q.weight: {from: " + p + "self_attn.q_proj.weight, rope_permute: "
                  "half_to_interleaved, heads: " + std::to_string(d.n_heads) + "}\n"
                  "  layers.*.attn.k.weight: {from: " + p + "self_attn.k_proj.weight, rope_permute: "
                  "half_to_interleaved, heads: " + std::to_string(d.kv_heads()) + "}\n"
                  "  layers.*.attn.v.weight: " + p + "self_attn.v_proj.weight\n"
                  "  layers.*.attn.o.weight: " + p + "self_attn.o_proj.weight\n"
                  "  layers.*.mlp_norm.weight: " + p + "post_attention_layernorm.weight\n"
                  "  layers.*.mlp.gate.weight: " + p + "mlp.gate_proj.weight\n"
                  "  layers.*.mlp.up.weight: " + p + "mlp.up_proj.weight\n"
                  "  layers.*.mlp.down.weight: " + p + "mlp.down_proj.weight\n"
                  "  norm.weight: model.norm.weight\n";
  if (!d.tie_embeddings) m += "  head.weight: lm_head.weight\n";
  m += "ignore: [" + p + "self_attn.rotary_emb.inv_freq";
  if (d.tie_embeddings) m += ", lm_head.weight";
  return m + "]\n";
}

constexpr const char* kMappingName = "<the built-in Hugging Face Llama mapping>";

// The safetensors files of a model directory: model.safetensors, or the shards that
// model.safetensors.index.json names (each must exist and hold the tensors it is named for).
void add_weights(const fs::path& dir, detail::TensorSource& source) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    source.add(single.string());
    return;
  }
  if (!fs::exists(index)) {
    std::string hint;
    if (fs::exists(dir / "pytorch_model.bin")) {
      hint = " (it has pytorch_model.bin, a pickle: convert it with scripts/pt-to-safetensors first)";
    }
    throw IoError("import-hf: '" + dir.string() + "' has neither model.safetensors nor model.safetensors.index.json" +
                  hint);
  }
  const std::string path = index.string();
  const JsonValue root = io::detail::parse_json(tessera::detail::read_regular_file(path, "safetensors index"), path);
  const JsonValue* map = root.kind == JsonValue::Kind::object ? root.member("weight_map") : nullptr;
  if (map == nullptr || map->kind != JsonValue::Kind::object || map->members.empty()) {
    throw IoError("import-hf: " + path + ": `weight_map` must be an object of tensor name: shard file");
  }
  std::vector<std::string> shards;
  std::map<std::string, std::string> shard_of;
  for (const auto& m : map->members) {
    if (m.value.kind != JsonValue::Kind::string || m.value.text.empty() ||
        m.value.text.find('/') != std::string::npos || m.value.text == "..") {
      throw IoError("import-hf: " + path + ": weight_map['" + m.key + "'] must be a file name in " + dir.string());
    }
    if (std::find(shards.begin(), shards.end(), m.value.text) == shards.end()) {
      if (!fs::exists(dir / m.value.text)) {
        throw IoError("import-hf: " + path + " names the shard '" + m.value.text + "' (for '" + m.key + "'), which '" +
                      dir.string() + "' lacks");
      }
      shards.push_back(m.value.text);
    }
    shard_of[m.key] = m.value.text;
  }
  for (const auto& shard : shards) source.add((dir / shard).string());
  for (const auto& [name, shard] : shard_of) {
    const auto it = source.by_name.find(name);
    if (it == source.by_name.end() || fs::path(it->second.first->path()).filename() != shard) {
      throw IoError("import-hf: " + path + " puts '" + name + "' in '" + shard + "', which does not hold it");
    }
  }
  for (const auto& [name, where] : source.by_name) {
    if (!shard_of.count(name)) {
      throw IoError("import-hf: '" + where.first->path() + "' holds '" + name + "', which " + path + " does not list");
    }
  }
}

std::string json_number(double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", x);
  std::string s = buffer;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

int import_hf_command(const std::vector<std::string>& args) {
  const Arguments a = parse(args, {"--step", "--layout"}, "import-hf", 2);
  const fs::path dir = a.paths[0];
  const std::string& root = a.paths[1];
  io::SaveOptions save;
  if (auto it = a.flags.find("--layout"); it != a.flags.end()) save.layout = io::parse_checkpoint_layout(it->second);
  if (auto it = a.flags.find("--step"); it != a.flags.end()) {
    try {
      std::size_t used = 0;
      save.step = std::stoll(it->second, &used);
      if (used != it->second.size() || save.step < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InvalidArgument("import-hf: --step wants an integer >= 0, got '" + it->second + "'");
    }
  }
  const std::string config_path = (dir / "config.json").string();
  if (!fs::exists(config_path)) throw IoError("import-hf: '" + dir.string() + "' has no config.json");
  const HfConfig config = read_config(config_path);

  detail::TensorSource source;
  add_weights(dir, source);
  for (const auto& [name, shape] : source.keys) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      throw ConfigError("import-hf: '" + source.file_of(name).path() + "' holds '" + name + "' " + shape_str(shape) +
                        ", a bias, which tessera's decoder projections do not have (" + config.architecture +
                        " with biases is not the Llama layout)");
    }
  }
  const io::WeightMapping mapping = io::WeightMapping::from_yaml(llama_mapping(config.decoder), kMappingName);
  std::string extra = "hf:\n  architecture: " + config.architecture + "\n";
  if (config.max_position_embeddings > 0) {
    extra += "  max_position_embeddings: " + std::to_string(config.max_position_embeddings) + "\n";
  }
  save.metadata = models::decoder_metadata(config.decoder, extra);
  // The loaders read f32 parameters: floating tensors (BF16, F16, F64) become f32.
  detail::import_into(root, save, source, dir.string(), mapping,
                      config_path + " (read as vocab_size -> model.vocab, hidden_size -> d_model, intermediate_size -> "
                      "hidden, num_key_value_heads -> n_kv_heads, num_hidden_layers -> n_layers, "
                      "tie_word_embeddings -> tie_embeddings)",
                      DType::f32, /*partial=*/false);
  return 0;
}

int export_hf_command(const std::vector<std::string>& args) {
  const Arguments a = parse(args, {"--dtype"}, "export-hf", 2);
  const io::CheckpointReader reader(a.paths[0]);
  const fs::path dir = a.paths[1];
  std::optional<DType> dtype;
  if (auto it = a.flags.find("--dtype"); it != a.flags.end()) {
    dtype = parse_dtype(it->second, "export-hf --dtype");
    if (*dtype != DType::f32 && *dtype != DType::bf16 && *dtype != DType::f64) {
      throw InvalidArgument("export-hf: --dtype is f32, bf16 or f64");
    }
  }
  const models::DecoderConfig d = models::decoder_config_from_metadata(reader.header().metadata, reader.file());
  if (!d.rope) {
    throw ConfigError("export-hf: model.rope is false in " + reader.file() +
                      ": a Hugging Face Llama always applies rotary embeddings, so this decoder has no Llama "
                      "equivalent (tessera-ckpt export with a mapping writes its tensors as they are)");
  }
  std::string architecture = "LlamaForCausalLM";
  std::int64_t max_positions = 0;
  // The `hf:` section import-hf adds; a checkpoint tessera-run or import wrote has none.
  const YAML::Node root = YAML::Load(reader.header().metadata);
  const YAML::Node hf = root.IsMap() ? root["hf"] : YAML::Node();
  if (hf.IsDefined() && hf.IsMap()) {
    const YAML::Node arch = hf["architecture"], positions = hf["max_position_embeddings"];
    if (arch.IsDefined() && arch.IsScalar()) architecture = arch.Scalar();
    try {
      if (positions.IsDefined() && positions.IsScalar()) max_positions = positions.as<std::int64_t>();
    } catch (const YAML::Exception&) {
      throw ConfigError("export-hf: " + reader.file() + ": hf.max_position_embeddings must be an integer");
    }
  }
  if (!kArchitectures.count(architecture)) {
    throw ConfigError("export-hf: " + reader.file() + ": hf.architecture '" + architecture + "' is not a Llama layout");
  }

  io::NamedShapes names;
  std::map<std::string, const io::DatasetInfo*> by_name;
  for (const auto& ds : reader.datasets()) {
    if (ds.section != "model") continue;
    names.emplace_back(ds.name, ds.shape);
    by_name[ds.name] = &ds;
  }
  const io::WeightMapping mapping = io::WeightMapping::from_yaml(llama_mapping(d), kMappingName);
  const std::vector<io::ExportStep> steps = mapping.plan_export(names, reader.file());
  io::NamedTensors tensors;
  for (const auto& s : steps) {
    std::vector<Tensor> parts;
    for (const auto& p : s.parts) parts.push_back(reader.read(*by_name.at(p.tessera_name)));
    Tensor t = io::WeightMapping::assemble(s, parts);
    if (dtype && t.dtype() != *dtype) t = ops::cast(t, *dtype);
    tensors.emplace_back(s.source_name, std::move(t));
  }
  const DType written = tensors.empty() ? DType::f32 : tensors.front().second.dtype();
  const char* torch_dtype = written == DType::bf16 ? "bfloat16" : written == DType::f64 ? "float64" : "float32";

  fs::create_directories(dir);
  io::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  std::string json = "{\n  \"architectures\": [\"" + architecture + "\"],\n  \"model_type\": \"" +
                     kArchitectures.at(architecture) + "\",\n";
  auto field = [&](const std::string& key, const std::string& value) { json += "  \"" + key + "\": " + value + ",\n"; };
  field("vocab_size", std::to_string(d.vocab));
  field("hidden_size", std::to_string(d.d_model));
  field("intermediate_size", std::to_string(d.hidden));
  field("num_hidden_layers", std::to_string(d.n_layers));
  field("num_attention_heads", std::to_string(d.n_heads));
  field("num_key_value_heads", std::to_string(d.kv_heads()));
  field("hidden_act", "\"silu\"");
  field("rms_norm_eps", json_number(d.eps));
  field("rope_theta", json_number(d.rope_theta));
  field("rope_scaling", "null");
  field("attention_bias", "false");
  if (architecture == "MistralForCausalLM") field("sliding_window", "null");
  if (architecture == "Qwen2ForCausalLM") field("use_sliding_window", "false");
  if (max_positions > 0) field("max_position_embeddings", std::to_string(max_positions));
  field("torch_dtype", std::string("\"") + torch_dtype + "\"");
  json += "  \"tie_word_embeddings\": " + std::string(d.tie_embeddings ? "true" : "false") + "\n}\n";
  const std::string config_path = (dir / "config.json").string();
  {
    std::ofstream out(config_path + ".tmp");
    out << json;
    out.close();
    if (!out) throw IoError("export-hf: cannot write " + config_path);
  }
  fs::rename(config_path + ".tmp", config_path);
  std::cout << "exported " << tensors.size() << " tensors of " << reader.file() << " (" << architecture
            << ", Hugging Face RoPE order) to " << (dir / "model.safetensors").string() << " and " << config_path
            << "\n";
  return 0;
}

}  // namespace tessera::ckpt
