#pragma once
// load_model: rebuild a trained model from its checkpoint alone, at the caller's layout.
//
// tessera-run stores the model's architecture as YAML in the checkpoint's metadata
// attribute (a top-level `model:` mapping, FieldEmulatorConfig::to_yaml). load_model
// reads it, builds the FieldEmulator on `mesh` (any tp/domain split: the checkpoint
// loader reads exactly the hyperslabs the current layout needs) and loads the weights
// (no optimizer state). This is the entry point the C and Fortran inference calls use:
//
//   tessera::Mesh mesh(comm, {tessera::DataParallelMode::none, /*tensor=*/1, /*domain=*/4});
//   auto model = tessera::load_model("runs/demo", mesh);        // root, step dir or file
//   const auto box = model->decomposition().box();              // this rank's lat band
//   tessera::Tensor y = model->predict(x);   // x f32 [B, C, box.lat.length, nlon], physical units
//
// Collective over mesh.world(). Any failure (no such checkpoint, metadata that is not a
// field-emulator description, weights that do not match) throws the same error on every
// rank, naming the file, key or dataset.

#include <memory>
#include <string>

#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera {

std::unique_ptr<models::FieldEmulator> load_model(const std::string& checkpoint_path, const Mesh& mesh);

namespace models {

// The architecture stored in a checkpoint (serial, no communication): `checkpoint_path`
// is a checkpoint.h5 file, a step directory or a root directory (through `latest`).
FieldEmulatorConfig read_model_config(const std::string& checkpoint_path);
// The same, from metadata text: a document whose `model:` mapping describes the model.
FieldEmulatorConfig model_config_from_metadata(const std::string& metadata, const std::string& source);
// Metadata text holding `config` under `model:` (and `extra`, more top-level YAML, after it).
std::string model_metadata(const FieldEmulatorConfig& config, const std::string& extra = "");

}  // namespace models
}  // namespace tessera
