#include "convert.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
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

// The parameters (name, global shape) of the model the metadata describes, when it is a
// model tessera can build here (the field emulator); nullopt for any other metadata.
// Checking against it at import names a mismatch before a checkpoint exists, instead
// of at the first load.
std::optional<io::NamedShapes> described_model(const std::string& metadata, const std::string& source) {
  if (metadata.empty()) return std::nullopt;
  YAML::Node root;
  try {
    root = YAML::Load(metadata);
  } catch (const YAML::Exception&) {
    return std::nullopt;  // already refused by the caller's check
  }
  if (!root.IsMap() || !root["model"].IsMap() || !root["model"]["type"].IsScalar() ||
      root["model"]["type"].Scalar() != "field_emulator") {
    return std::nullopt;
  }
  const models::FieldEmulatorConfig config = models::model_config_from_metadata(metadata, source);
  Mesh serial(MPI_COMM_SELF, ParallelismConfig{});
  models::FieldEmulator model(config, serial);
  io::NamedShapes out;
  for (const auto& [name, p] : model.named_parameters()) out.emplace_back(name, p->global_shape);
  return out;
}

std::vector<std::string> must_positional(const Options& o, std::size_t n, const std::string& command) {
  if (o.positional.size() != n) {
    throw InvalidArgument(command + ": expected " + std::to_string(n) + " paths, got " +
                          std::to_string(o.positional.size()));
  }
  return o.positional;
}

}  // namespace

int import_command(const std::vector<std::string>& args) {
  const Options o =
      parse_options(args, {"--mapping", "--metadata", "--dtype", "--step", "--layout"}, "import");
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
  const io::SafetensorsFile file(input);
  const io::WeightMapping mapping = mapping_of(o);
  std::string metadata_source = input + " (__metadata__." + metadata_key + ")";
  if (auto it = o.flags.find("--metadata"); it != o.flags.end()) {
    save.metadata = read_text_file(it->second, "metadata file");
    metadata_source = it->second;
  } else if (auto m = file.metadata().find(metadata_key); m != file.metadata().end()) {
    save.metadata = m->second;
  }
  if (!save.metadata.empty()) check_unique_yaml_keys(save.metadata, metadata_source);

  io::NamedShapes keys;
  for (const auto& e : file.tensors()) keys.emplace_back(e.name, e.shape);
  std::vector<io::ImportStep> steps = mapping.plan_import(keys, input);
  // The dtype a step's tensor will have (import converts only what --dtype asks).
  auto dtype_of_step = [&](const io::ImportStep& s) -> std::string {
    const std::string& stored = file.find(s.source_name)->dtype;
    if (!dtype) return stored;
    return stored[0] == 'F' || stored == "BF16" ? std::string(io::safetensors_dtype_name(*dtype)) : "I64";
  };

  if (const auto model = described_model(save.metadata, metadata_source)) {
    // Names and shapes against the model; the checkpoint then follows the model's order.
    std::map<std::string, const io::ImportStep*> by_name;
    for (const auto& s : steps) by_name[s.tessera_name] = &s;
    std::map<std::string, Shape> wanted(model->begin(), model->end());
    for (const auto& s : steps) {
      const std::string from = "'" + s.tessera_name + "' (from '" + s.source_name + "' of '" + input + "'" +
                               (s.rule.empty() ? "" : ", rule " + s.rule) + ")";
      const auto it = wanted.find(s.tessera_name);
      if (it == wanted.end()) {
        throw ShapeError("import: the mapping makes " + from + " but the field emulator that " + metadata_source +
                         " describes has no such parameter");
      }
      if (it->second != s.shape) {
        throw ShapeError("import: " + from + " has shape " + shape_str(s.shape) + " but the model described in " +
                         metadata_source + " wants " + shape_str(it->second));
      }
      const std::string dt = dtype_of_step(s);
      if (dt != "F32") {
        throw ShapeError("import: " + from + " has dtype " + dt + " but the model's parameters are f32; add --dtype f32");
      }
    }
    std::vector<io::ImportStep> ordered;
    for (const auto& [name, shape] : *model) {
      const auto it = by_name.find(name);
      if (it == by_name.end()) {
        throw ShapeError("import: the model described in " + metadata_source + " has the parameter '" + name +
                         "' " + shape_str(shape) + ", which no key of '" + input + "' makes (mapping " +
                         mapping.source() + ")");
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
      cached = file.read(*file.find(s.source_name), dtype);
      cached_name = s.source_name;
    }
    parameters.emplace_back(io::WeightMapping::apply(s, cached));
  }
  NamedParameters named;
  for (std::size_t i = 0; i < steps.size(); ++i) named.emplace_back(steps[i].tessera_name, &parameters[i]);

  const Mesh serial(MPI_COMM_SELF, ParallelismConfig{});
  const std::string dir = io::save_checkpoint(root, serial, named, nullptr, save);
  std::cout << "imported " << named.size() << " tensors from " << file.tensors().size() << " keys of " << input
            << " (mapping " << mapping.source() << ") into " << dir << "\n";
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
