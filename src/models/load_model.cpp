#include "tessera/models/load_model.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"

namespace tessera {

namespace models {

FieldEmulatorConfig model_config_from_metadata(const std::string& metadata, const std::string& source) {
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
  YAML::Emitter out;
  out << root["model"];
  return FieldEmulatorConfig::from_yaml(out.c_str(), source + " metadata");
}

std::string model_metadata(const FieldEmulatorConfig& config, const std::string& extra) {
  std::istringstream lines(config.to_yaml());
  std::string text = "model:\n", line;
  while (std::getline(lines, line)) text += "  " + line + "\n";
  return text + extra;
}

FieldEmulatorConfig read_model_config(const std::string& checkpoint_path) {
  io::CheckpointReader reader(checkpoint_path);
  return model_config_from_metadata(reader.header().metadata, reader.file());
}

}  // namespace models

std::unique_ptr<models::FieldEmulator> load_model(const std::string& checkpoint_path, const Mesh& mesh) {
  // Rank 0 reads the header and broadcasts the text (io::read_checkpoint_metadata).
  const io::CheckpointMetadata header = io::read_checkpoint_metadata(checkpoint_path, mesh.world());
  const std::string& metadata = header.metadata;
  const std::string& file = header.file;
  // Same text on every rank, so parsing fails alike everywhere.
  const models::FieldEmulatorConfig config = models::model_config_from_metadata(metadata, file);
  std::unique_ptr<models::FieldEmulator> model;
  // A layout the model cannot take (mlp_hidden not divisible by tp, a band thinner than
  // the halo) is the same verdict on every rank; construction is collective.
  model = std::make_unique<models::FieldEmulator>(config, mesh);
  io::load_checkpoint(file, mesh, *model);
  return model;
}

}  // namespace tessera
