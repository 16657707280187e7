#include "convert.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/io/weight_mapping.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/parallelism.hpp"

namespace tessera::ckpt {

namespace {

// The safetensors __metadata__ keys export writes; import reads tessera_metadata back, so
// an exported checkpoint imports with its model description.
constexpr const char* metadata_key = "tessera_metadata";

struct Options {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;  // "--mapping" -> value
};

Options parse_options(const std::vector<std::string>& args, const std::vector<std::string>& known,
                      const std::string& command) {
  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      o.positional.push_back(a);
      continue;
    }
    std::string name = a, value;
    const auto eq = a.find('=');
    if (eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) throw InvalidArgument(command + ": " + a + " needs a value");
      value = args[++i];
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InvalidArgument(command + ": unknown option " + name + " (expected " + list + ")");
    }
    if (!o.flags.emplace(name, value).second) throw InvalidArgument(command + ": " + name + " is given twice");
  }
  return o;
}

// Through the one check for non-regular files: a FIFO as --metadata blocked the import,
// a device was read until memory ran out.
std::string read_text_file(const std::string& path, const std::string& what) {
  return tessera::detail::read_regular_file(path, what);
}

io::WeightMapping mapping_of(const Options& o) {
  const auto it = o.flags.find("--mapping");
  return it == o.flags.end() ? io::WeightMapping() : io::WeightMapping::from_file(it->second);
}

// One parameter of the model the metadata describes: its name and global shape and,
// where the metadata's keys fix them, which key each dim's extent comes from ("vocab")
// and how ("model.vocab (32)"), so a contradiction names the key.
struct DescribedParameter {
  std::string name;
  Shape shape;
  std::vector<std::string> keys, reasons;  // per dim; empty: none known
};

struct DescribedModel {
  std::string kind;  // "field emulator", "decoder"
  std::vector<DescribedParameter> parameters;
  models::DecoderConfig decoder;  // kind decoder
};

std::string num(std::int64_t v) { return std::to_string(v); }

// The decoder's parameters from its description alone (the shapes models::Decoder
// registers, in its order), without building it: an imported model may be large.
std::vector<DescribedParameter> decoder_parameters(const models::DecoderConfig& c) {
  const std::int64_t head_dim = c.d_model / c.n_heads;
  const std::string d = "model.d_model (" + num(c.d_model) + ")";
  const std::string v = "model.vocab (" + num(c.vocab) + ")";
  const std::string h = "model.hidden (" + num(c.hidden) + ")";
  const std::string kv = "model.n_kv_heads x head_dim (" + num(c.kv_heads()) + " x " + num(head_dim) + ", head_dim = " +
                         "model.d_model / model.n_heads = " + num(c.d_model) + " / " + num(c.n_heads) + ")";
  std::vector<DescribedParameter> out;
  auto add = [&](std::string name, Shape shape, std::vector<std::string> keys, std::vector<std::string> reasons) {
    out.push_back({std::move(name), std::move(shape), std::move(keys), std::move(reasons)});
  };
  add("embed.weight", {c.vocab, c.d_model}, {"vocab", "d_model"}, {v, d});
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string l = "layers." + num(i) + ".";
    add(l + "attn_norm.weight", {c.d_model}, {"d_model"}, {d});
    add(l + "attn.q.weight", {c.d_model, c.d_model}, {"d_model", "d_model"}, {d, d});
    for (const char* x : {"attn.k.weight", "attn.v.weight"}) {
      add(l + x, {c.kv_heads() * head_dim, c.d_model}, {"n_kv_heads", "d_model"}, {kv, d});
    }
    add(l + "attn.o.weight", {c.d_model, c.d_model}, {"d_model", "d_model"}, {d, d});
    add(l + "mlp_norm.weight", {c.d_model}, {"d_model"}, {d});
    add(l + "mlp.gate.weight", {c.hidden, c.d_model}, {"hidden", "d_model"}, {h, d});
    add(l + "mlp.up.weight", {c.hidden, c.d_model}, {"hidden", "d_model"}, {h, d});
    add(l + "mlp.down.weight", {c.d_model, c.hidden}, {"d_model", "hidden"}, {d, h});
  }
  add("norm.weight", {c.d_model}, {"d_model"}, {d});
  if (!c.tie_embeddings) add("head.weight", {c.vocab, c.d_model}, {"vocab", "d_model"}, {v, d});
  return out;
}

// The decoder description's own rules (what models::Decoder would refuse), naming the key.
void check_decoder_description(const models::DecoderConfig& c, const std::string& source) {
  auto fail = [&](const std::string& what) { throw ConfigError("import: " + source + ": " + what); };
  if (c.vocab < 1 || c.d_model < 1 || c.n_heads < 1 || c.hidden < 1 || c.n_layers < 0) {
    fail("model.vocab, d_model, n_heads and hidden must be >= 1 and n_layers >= 0");
  }
  if (c.d_model % c.n_heads != 0) {
    fail("model.d_model (" + num(c.d_model) + ") must be a multiple of model.n_heads (" + num(c.n_heads) + ")");
  }
  if (c.n_kv_heads < 0 || c.n_heads % c.kv_heads() != 0) {
    fail("model.n_kv_heads (" + num(c.n_kv_heads) + ") must divide model.n_heads (" + num(c.n_heads) + ")");
  }
  if (c.rope && (c.d_model / c.n_heads) % 2 != 0) {
    fail("model.rope needs an even head dimension: model.d_model / model.n_heads is " + num(c.d_model / c.n_heads));
  }
  if (!(c.eps > 0) || !std::isfinite(c.eps)) fail("model.eps must be a finite number > 0");
  if (c.rope && (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))) {
    fail("model.rope_theta must be a finite number > 0");
  }
}

// The model the metadata describes, when it is one tessera can check here (the field
// emulator, the decoder); nullopt for any other metadata. Checking against it at import
// names a mismatch before a checkpoint exists, instead of at the first load.
std::optional<DescribedModel> described_model(const std::string& metadata, const std::string& source) {
  if (metadata.empty()) return std::nullopt;
  YAML::Node root;
  try {
    root = YAML::Load(metadata);
  } catch (const YAML::Exception&) {
    return std::nullopt;  // already refused by the caller's check
  }
  if (!root.IsMap() || !root["model"].IsMap() || !root["model"]["type"].IsScalar()) return std::nullopt;
  const std::string type = root["model"]["type"].Scalar();
  DescribedModel out;
  if (type == "decoder") {
    out.kind = "decoder";
    out.decoder = models::decoder_config_from_metadata(metadata, source);
    check_decoder_description(out.decoder, source);
    out.parameters = decoder_parameters(out.decoder);
    return out;
  }
  if (type != "field_emulator") return std::nullopt;
  out.kind = "field emulator";
  const models::FieldEmulatorConfig config = models::model_config_from_metadata(metadata, source);
  Mesh serial(MPI_COMM_SELF, ParallelismConfig{});
  models::FieldEmulator model(config, serial);
  for (const auto& [name, p] : model.named_parameters()) out.parameters.push_back({name, p->global_shape, {}, {}});
  return out;
}

// Why the decoder `model` lacks `name` (an unexpected tensor) or the file lacks it (a
// missing one), naming the key that decides it; empty when no key does.
std::string decoder_key_for_name(const DescribedModel& model, const std::string& name, bool unexpected) {
  if (model.kind != "decoder") return "";
  const models::DecoderConfig& c = model.decoder;
  if (name.rfind("layers.", 0) == 0) {
    const std::string layer = name.substr(7, name.find('.', 7) - 7);
    return unexpected ? "model.n_layers is " + num(c.n_layers) + ", so the decoder has no layer " + layer
                      : "model.n_layers is " + num(c.n_layers) + ", so the decoder has a layer " + layer;
  }
  if (name == "head.weight") {
    return unexpected ? "model.tie_embeddings is true, so the decoder has no head.weight (the logits use embed.weight)"
                      : "model.tie_embeddings is false, so the decoder has its own head.weight";
  }
  return "";
}

std::vector<std::string> must_positional(const Options& o, std::size_t n, const std::string& command) {
  if (o.positional.size() != n) {
    throw InvalidArgument(command + ": expected " + std::to_string(n) + " paths, got " +
                          std::to_string(o.positional.size()));
  }
  return o.positional;
}

}  // namespace

void detail::import_into(const std::string& root, const io::SaveOptions& save, const detail::TensorSource& source,
                 const std::string& input, const io::WeightMapping& mapping, const std::string& metadata_source,
                 const std::optional<DType>& dtype, bool partial) {
  std::vector<io::ImportStep> steps = mapping.plan_import(source.keys, input);
  // The dtype a step's tensor will have (import converts only what --dtype asks).
  auto dtype_of_step = [&](const io::ImportStep& s) -> std::string {
    const std::string& stored = source.entry(s.source_name).dtype;
    if (!dtype) return stored;
    return stored[0] == 'F' || stored == "BF16" ? std::string(io::safetensors_dtype_name(*dtype)) : "I64";
  };

  if (const auto model = described_model(save.metadata, metadata_source)) {
    // Names and shapes against the model; the checkpoint then follows the model's order.
    std::map<std::string, const io::ImportStep*> by_name;
    for (const auto& s : steps) by_name[s.tessera_name] = &s;
    std::map<std::string, const DescribedParameter*> wanted;
    for (const auto& p : model->parameters) wanted[p.name] = &p;
    auto from = [&](const io::ImportStep& s) {
      return "'" + s.tessera_name + "' (from '" + s.source_name + "' of '" + input + "'" +
             (s.rule.empty() ? "" : ", rule " + s.rule) + ")";
    };
    // In the model's order, so the first contradiction is the one the earliest tensor
    // shows (a wrong vocab or d_model at embed.weight).
    for (const auto& p : model->parameters) {
      const auto it = by_name.find(p.name);
      if (it == by_name.end()) continue;  // below, after the unexpected ones
      const io::ImportStep& s = *it->second;
      if (s.shape == p.shape) continue;
      if (s.shape.size() == p.shape.size() && !p.keys.empty()) {
        for (std::size_t d = 0; d < s.shape.size(); ++d) {
          if (s.shape[d] == p.shape[d]) continue;
          throw ShapeError("import: " + from(s) + " has shape " + shape_str(s.shape) + ", which contradicts model." +
                           p.keys[d] + " in " + metadata_source + ": its dim " + std::to_string(d) + " is " +
                           std::to_string(s.shape[d]) + " but " + p.reasons[d] + " makes it " +
                           std::to_string(p.shape[d]) + " (the " + model->kind + " wants " + shape_str(p.shape) + ")");
        }
      }
      throw ShapeError("import: " + from(s) + " has shape " + shape_str(s.shape) + " but the " + model->kind +
                       " described in " + metadata_source + " wants " + shape_str(p.shape));
    }
    for (const auto& s : steps) {
      if (wanted.count(s.tessera_name)) continue;
      const std::string why = decoder_key_for_name(*model, s.tessera_name, /*unexpected=*/true);
      throw ShapeError("import: the mapping makes " + from(s) + " but the " + model->kind + " that " +
                       metadata_source + " describes has no such parameter" + (why.empty() ? "" : ": " + why));
    }
    std::vector<io::ImportStep> ordered;
    for (const auto& p : model->parameters) {
      const auto it = by_name.find(p.name);
      if (it == by_name.end()) {
        if (partial) continue;
        const std::string why = decoder_key_for_name(*model, p.name, /*unexpected=*/false);
        throw ShapeError("import: the " + model->kind + " described in " + metadata_source + " has the parameter '" +
                         p.name + "' " + shape_str(p.shape) + ", which no key of '" + input + "' makes (mapping " +
                         mapping.source() + ")" + (why.empty() ? "" : ": " + why) +
                         " (--partial writes a checkpoint without it)");
      }
      const std::string dt = dtype_of_step(*it->second);
      if (dt != "F32") {
        throw ShapeError("import: " + from(*it->second) + " has dtype " + dt + " but the " + model->kind +
                         "'s parameters are f32 (what load_model and load_decoder read); add --dtype f32");
      }
      ordered.push_back(*it->second);
    }
    steps = std::move(ordered);
  }

  const std::string step_dir = (std::filesystem::path(root) / io::checkpoint_directory_name(save.step)).string();
  if (std::filesystem::exists(step_dir)) {
    throw IoError("import: '" + step_dir + "' already exists; choose another --step or output directory");
  }
  // An import below the root's newest step would move `latest` back to it, so a resume
  // there would silently start from the imported weights and drop the newer steps.
  if (const auto committed = io::list_checkpoints(root); !committed.empty()) {
    const std::string newest = std::filesystem::path(committed.back()).filename().string();
    const std::int64_t newest_step = std::stoll(newest.substr(5));  // list_checkpoints: step_<digits> only
    if (newest_step > save.step) {
      throw IoError("import: '" + root + "' already holds " + newest + ", newer than --step " +
                    std::to_string(save.step) + ": the import would move its 'latest' back; pass a --step above " +
                    std::to_string(newest_step) + " or import into another directory");
    }
  }

  // Read each PyTorch tensor once (a fused tensor feeds several steps), cut it, and keep
  // the results as replicated parameters: a checkpoint of master arrays, which every
  // layout loads its own blocks of.
  std::vector<Parameter> parameters;
  parameters.reserve(steps.size());
  std::string cached_name;
  Tensor cached;
  for (const auto& s : steps) {
    if (s.source_name != cached_name) {
      cached = source.file_of(s.source_name).read(source.entry(s.source_name), dtype);
      cached_name = s.source_name;
    }
    parameters.emplace_back(io::WeightMapping::apply(s, cached));
  }
  NamedParameters named;
  for (std::size_t i = 0; i < steps.size(); ++i) named.emplace_back(steps[i].tessera_name, &parameters[i]);

  const Mesh serial(MPI_COMM_SELF, ParallelismConfig{});
  const std::string dir = io::save_checkpoint(root, serial, named, nullptr, save);
  std::cout << "imported " << named.size() << " tensors from " << source.keys.size() << " keys of " << input
            << " (mapping " << mapping.source() << ") into " << dir << "\n";
}


int import_command(const std::vector<std::string>& args) {
  const Options o =
      parse_options(args, {"--mapping", "--metadata", "--dtype", "--step", "--layout", "--partial"}, "import");
  const auto paths = must_positional(o, 2, "import");
  const std::string& input = paths[0];
  const std::string& root = paths[1];
  const std::string extension = std::filesystem::path(input).extension().string();
  if (extension == ".pt" || extension == ".pth" || extension == ".bin" || extension == ".ckpt") {
    throw InvalidArgument("import: '" + input +
                          "' is a PyTorch pickle, which only PyTorch can read: convert it first with "
                          "scripts/pt-to-safetensors " + input + " OUT.safetensors, then import OUT.safetensors");
  }

  io::SaveOptions save;
  std::optional<DType> dtype;
  bool partial = false;
  if (auto it = o.flags.find("--partial"); it != o.flags.end()) {
    if (it->second != "true" && it->second != "false") {
      throw InvalidArgument("import: --partial wants true or false, got '" + it->second + "'");
    }
    partial = it->second == "true";
  }
  if (auto it = o.flags.find("--dtype"); it != o.flags.end()) {
    dtype = parse_dtype(it->second, "import --dtype");
    if (!is_floating(*dtype)) {
      throw InvalidArgument("import: --dtype is the floating dtype (f32, f64 or bf16) that floating tensors "
                            "convert to; integer tensors always become i64");
    }
  }
  if (auto it = o.flags.find("--layout"); it != o.flags.end()) save.layout = io::parse_checkpoint_layout(it->second);
  if (auto it = o.flags.find("--step"); it != o.flags.end()) {
    try {
      std::size_t used = 0;
      save.step = std::stoll(it->second, &used);
      if (used != it->second.size() || save.step < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InvalidArgument("import: --step wants an integer >= 0, got '" + it->second + "'");
    }
  }

  // Everything is read and checked before the checkpoint writer starts, and the writer
  // commits atomically: a failed import leaves no step directory behind.
  detail::TensorSource source;
  source.add(input);
  const io::SafetensorsFile& file = *source.files.front();
  const io::WeightMapping mapping = mapping_of(o);
  std::string metadata_source = input + " (__metadata__." + metadata_key + ")";
  if (auto it = o.flags.find("--metadata"); it != o.flags.end()) {
    save.metadata = read_text_file(it->second, "metadata file");
    metadata_source = it->second;
  } else if (auto m = file.metadata().find(metadata_key); m != file.metadata().end()) {
    save.metadata = m->second;
  }
  if (!save.metadata.empty()) check_unique_yaml_keys(save.metadata, metadata_source);
  detail::import_into(root, save, source, input, mapping, metadata_source, dtype, partial);
  return 0;
}

int export_command(const std::vector<std::string>& args) {
  const Options o = parse_options(args, {"--format", "--mapping"}, "export");
  const auto paths = must_positional(o, 2, "export");
  if (auto it = o.flags.find("--format"); it != o.flags.end() && it->second != "safetensors") {
    throw InvalidArgument("export: --format '" + it->second + "' is not supported (expected safetensors)");
  }
  const io::CheckpointReader reader(paths[0]);
  const io::WeightMapping mapping = mapping_of(o);

  // The master weights only (/model); optimizer state has no PyTorch state-dict key.
  io::NamedShapes names;
  std::map<std::string, const io::DatasetInfo*> by_name;
  for (const auto& d : reader.datasets()) {
    if (d.section != "model") continue;
    names.emplace_back(d.name, d.shape);
    by_name[d.name] = &d;
  }
  const std::vector<io::ExportStep> steps = mapping.plan_export(names, reader.file());

  io::NamedTensors tensors;
  for (const auto& s : steps) {
    std::vector<Tensor> parts;
    for (const auto& p : s.parts) parts.push_back(reader.read(*by_name.at(p.tessera_name)));
    tensors.emplace_back(s.source_name, io::WeightMapping::assemble(s, parts));
  }
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {"tessera_checkpoint", reader.file()},
                                              {"tessera_step", std::to_string(reader.header().step)}};
  if (!reader.header().metadata.empty()) metadata[metadata_key] = reader.header().metadata;
  io::write_safetensors(paths[1], tensors, metadata);
  std::cout << "exported " << tensors.size() << " tensors of " << reader.file() << " (mapping " << mapping.source()
            << ") to " << paths[1] << "\n";
  return 0;
}

}  // namespace tessera::ckpt
