#include "tessera/models/load_model.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <sstream>

#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/tp/mappings.hpp"

namespace tessera {

namespace models {

namespace {

// The `model:` mapping of checkpoint metadata.
YAML::Node model_node(const std::string& metadata, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(metadata);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": the checkpoint metadata is not YAML: " + e.what());
  }
  if (!root.IsMap() || !root["model"].IsDefined() || !root["model"].IsMap()) {
    throw ConfigError(source +
                      ": the checkpoint metadata has no `model:` mapping (was it written by tessera-run?)");
  }
  return root["model"];
}

std::string indented_under_model(const std::string& yaml, const std::string& extra) {
  std::istringstream lines(yaml);
  std::string text = "model:\n", line;
  while (std::getline(lines, line)) text += "  " + line + "\n";
  return text + extra;
}

}  // namespace

const char* model_type_name(ModelType type) {
  return type == ModelType::decoder ? "decoder" : "field_emulator";
}

ModelType model_type_from_metadata(const std::string& metadata, const std::string& source) {
  const YAML::Node model = model_node(metadata, source);
  if (!model["type"].IsDefined()) return ModelType::field_emulator;
  const std::string type = model["type"].IsScalar() ? model["type"].Scalar() : "(not a scalar)";
  if (type == "field_emulator") return ModelType::field_emulator;
  if (type == "decoder") return ModelType::decoder;
  throw ConfigError(source + " metadata: model.type is '" + type + "', expected field_emulator or decoder");
}

FieldEmulatorConfig model_config_from_metadata(const std::string& metadata, const std::string& source) {
  const YAML::Node model = model_node(metadata, source);
  YAML::Emitter out;
  out << model;
  return FieldEmulatorConfig::from_yaml(out.c_str(), source + " metadata");
}

std::string model_metadata(const FieldEmulatorConfig& config, const std::string& extra) {
  return indented_under_model(config.to_yaml(), extra);
}

std::string decoder_yaml(const DecoderConfig& a) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", a.eps);
  std::string s = "type: decoder\nvocab: " + std::to_string(a.vocab) + "\nd_model: " + std::to_string(a.d_model) +
                  "\nn_heads: " + std::to_string(a.n_heads) + "\nhidden: " + std::to_string(a.hidden) +
                  "\nn_layers: " + std::to_string(a.n_layers) + "\neps: " + number +
                  "\ntie_embeddings: " + (a.tie_embeddings ? "true" : "false") + "\n";
  // The attention options only where they differ from the defaults, so the metadata of a
  // plain decoder stays what it always was.
  if (a.n_kv_heads != 0 && a.n_kv_heads != a.n_heads) s += "n_kv_heads: " + std::to_string(a.n_kv_heads) + "\n";
  if (a.rope) {
    std::snprintf(number, sizeof number, "%.17g", a.rope_theta);
    s += std::string("rope: true\nrope_theta: ") + number + "\n";
  }
  return s;
}

DecoderConfig decoder_config_from_metadata(const std::string& metadata, const std::string& source) {
  const YAML::Node model = model_node(metadata, source);
  const ModelType type = model_type_from_metadata(metadata, source);
  if (type != ModelType::decoder) {
    throw ConfigError(source + ": the checkpoint holds a model of type '" + model_type_name(type) +
                      "', not a decoder");
  }
  DecoderConfig a;
  bool seen[6] = {};
  for (const auto& item : model) {
    const std::string key = item.first.Scalar();
    const YAML::Node& v = item.second;
    try {
      if (key == "type") continue;
      if (key == "vocab") { a.vocab = v.as<std::int64_t>(); seen[0] = true; }
      else if (key == "d_model") { a.d_model = v.as<std::int64_t>(); seen[1] = true; }
      else if (key == "n_heads") { a.n_heads = v.as<std::int64_t>(); seen[2] = true; }
      else if (key == "hidden") { a.hidden = v.as<std::int64_t>(); seen[3] = true; }
      else if (key == "n_layers") { a.n_layers = v.as<std::int64_t>(); seen[4] = true; }
      else if (key == "eps") a.eps = v.as<double>();
      else if (key == "tie_embeddings") { a.tie_embeddings = v.as<bool>(); seen[5] = true; }
      else if (key == "n_kv_heads") a.n_kv_heads = v.as<std::int64_t>();  // absent: n_heads
      else if (key == "rope") a.rope = v.as<bool>();                      // absent: off
      else if (key == "rope_theta") a.rope_theta = v.as<double>();
      else throw ConfigError(source + " metadata: model." + key + ": unknown key '" + key + "'");
    } catch (const YAML::Exception& e) {
      throw ConfigError(source + " metadata: model." + key + ": bad value: " + e.what());
    }
  }
  const char* names[6] = {"vocab", "d_model", "n_heads", "hidden", "n_layers", "tie_embeddings"};
  for (int i = 0; i < 6; ++i) {
    if (!seen[i]) throw ConfigError(source + " metadata: model." + names[i] + " is missing");
  }
  return a;
}

std::string decoder_metadata(const DecoderConfig& config, const std::string& extra) {
  return indented_under_model(decoder_yaml(config), extra);
}

LoadedDecoder::LoadedDecoder(const DecoderConfig& config, const Mesh& mesh) : config_(config), mesh_(mesh) {
  if (mesh.domain_size() != 1 || mesh.pp_size() != 1) {
    throw InvalidArgument("a decoder runs on a mesh of domain 1 and pipeline 1 (tp and dp only); this mesh has domain " +
                          std::to_string(mesh.domain_size()) + " and pipeline " + std::to_string(mesh.pp_size()));
  }
  decoder_ = std::make_unique<Decoder>(config, DType::f32, mesh.device());
  if (mesh.tp_size() > 1) {
    vocab_sharded_ = parallelize_decoder(*decoder_, mesh.tp(), /*sequence_parallel=*/false).vocab_sharded_logits;
  }
}

Tensor LoadedDecoder::logits(const Tensor& ids) {
  Tensor out = decoder_->forward(ids.to(mesh_.device()));
  // The head's vocabulary shards (uneven when tp does not divide vocab) back into one row.
  if (vocab_sharded_) out = tp::gather_along(out, out.dim() - 1, mesh_.tp(), config_.vocab);
  decoder_->release_activations();  // inference keeps no cache for a backward
  return out;
}

FieldEmulatorConfig read_model_config(const std::string& checkpoint_path) {
  io::CheckpointReader reader(checkpoint_path);
  return model_config_from_metadata(reader.header().metadata, reader.file());
}

}  // namespace models

namespace {

// Rank 0 reads the header and broadcasts the text (io::read_checkpoint_metadata): the
// same text on every rank, so parsing fails alike everywhere.
io::CheckpointMetadata header_of(const std::string& checkpoint_path, const Mesh& mesh) {
  return io::read_checkpoint_metadata(checkpoint_path, mesh.world());
}

std::unique_ptr<models::FieldEmulator> emulator_from(const io::CheckpointMetadata& header, const Mesh& mesh) {
  const models::FieldEmulatorConfig config = models::model_config_from_metadata(header.metadata, header.file);
  // Inference runs the whole model on every rank: a pipeline stage would hold it again.
  if (mesh.pp_size() != 1) {
    throw InvalidArgument("a field emulator runs on a mesh of pipeline 1 (dp, tp and domain only); this mesh has "
                          "pipeline " + std::to_string(mesh.pp_size()));
  }
  // A layout the model cannot take (mlp_hidden not divisible by tp, a band thinner than
  // the halo) is the same verdict on every rank; construction is collective.
  auto model = std::make_unique<models::FieldEmulator>(config, mesh);
  io::load_checkpoint(header.file, mesh, *model);
  return model;
}

std::unique_ptr<models::LoadedDecoder> decoder_from(const io::CheckpointMetadata& header, const Mesh& mesh) {
  const models::DecoderConfig config = models::decoder_config_from_metadata(header.metadata, header.file);
  // Mesh and tp verdicts (n_heads not divisible by tp) depend only on the config and the
  // mesh: the same on every rank.
  auto model = std::make_unique<models::LoadedDecoder>(config, mesh);
  // Strict: a checkpoint holding more than the decoder (LoRA adapters) is an error naming
  // the datasets, rather than a model that silently drops them.
  io::load_checkpoint(header.file, mesh, model->decoder());
  return model;
}

}  // namespace

std::unique_ptr<models::FieldEmulator> load_model(const std::string& checkpoint_path, const Mesh& mesh) {
  const io::CheckpointMetadata header = header_of(checkpoint_path, mesh);
  if (models::model_type_from_metadata(header.metadata, header.file) == models::ModelType::decoder) {
    throw ConfigError(header.file + ": the checkpoint holds a decoder, not a field emulator (load it with "
                      "load_decoder or load_any_model)");
  }
  return emulator_from(header, mesh);
}

std::unique_ptr<models::LoadedDecoder> load_decoder(const std::string& checkpoint_path, const Mesh& mesh) {
  const io::CheckpointMetadata header = header_of(checkpoint_path, mesh);
  if (models::model_type_from_metadata(header.metadata, header.file) != models::ModelType::decoder) {
    throw ConfigError(header.file + ": the checkpoint holds a field_emulator, not a decoder (load it with "
                      "load_model or load_any_model)");
  }
  return decoder_from(header, mesh);
}

models::LoadedModel load_any_model(const std::string& checkpoint_path, const Mesh& mesh) {
  const io::CheckpointMetadata header = header_of(checkpoint_path, mesh);
  models::LoadedModel loaded;
  loaded.type = models::model_type_from_metadata(header.metadata, header.file);
  if (loaded.type == models::ModelType::decoder) {
    loaded.decoder = decoder_from(header, mesh);
  } else {
    loaded.emulator = emulator_from(header, mesh);
  }
  return loaded;
}

}  // namespace tessera
