#pragma once
// tessera-ckpt import / export: PyTorch weights (safetensors) in and out of tessera
// checkpoints, with a key mapping (io/weight_mapping.hpp). docs/pytorch.md is the guide.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/io/weight_mapping.hpp"

namespace tessera::ckpt {

// `args` are the words after the command name. Both return the exit status (0) or
// throw; a usage error is an InvalidArgument whose message says what is wrong.
//   import INPUT.safetensors OUTPUT_ROOT [--mapping MAP.yaml] [--metadata META.yaml]
//          [--dtype f32|f64|bf16] [--step N] [--layout shared|per_rank] [--partial true]
//   export PATH OUTPUT.safetensors [--format safetensors] [--mapping MAP.yaml]
int import_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);
// Hugging Face model directories (hf.cpp):
//   import-hf DIR OUTPUT_ROOT [--step N] [--layout shared|per_rank]
//   export-hf PATH DIR
int import_hf_command(const std::vector<std::string>& args);
int export_hf_command(const std::vector<std::string>& args);

namespace detail {

// The tensors of one or more safetensors files (the shards of one model), by name.
struct TensorSource {
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;
  std::map<std::string, std::pair<const io::SafetensorsFile*, const io::SafetensorsEntry*>> by_name;
  io::NamedShapes keys;  // file by file, each in its order

  void add(const std::string& path) {
    files.push_back(std::make_unique<io::SafetensorsFile>(path));
    const io::SafetensorsFile& f = *files.back();
    for (const auto& e : f.tensors()) {
      const auto [it, fresh] = by_name.emplace(e.name, std::make_pair(&f, &e));
      if (!fresh) {
        throw IoError("import: the tensor '" + e.name + "' is in both '" + it->second.first->path() + "' and '" +
                      f.path() + "'");
      }
      keys.emplace_back(e.name, e.shape);
    }
  }
  const io::SafetensorsEntry& entry(const std::string& name) const { return *by_name.at(name).second; }
  const io::SafetensorsFile& file_of(const std::string& name) const { return *by_name.at(name).first; }
};

// The import itself: plan `source`'s keys with `mapping`, check them against the model
// `save.metadata` describes (when it describes one), and write the checkpoint under
// `root`. `input` names the source in messages.
void import_into(const std::string& root, const io::SaveOptions& save, const TensorSource& source,
                 const std::string& input, const io::WeightMapping& mapping, const std::string& metadata_source,
                 const std::optional<DType>& dtype, bool partial);

}  // namespace detail

}  // namespace tessera::ckpt
