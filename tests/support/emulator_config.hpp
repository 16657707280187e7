#pragma once
// The small field emulators the tests build, each in one place: the one the C API and
// coupling tests save and load, and the one the domain twins (host and device) run; and
// the checkpoint of an emulator that load_model reads back.

#include <cstdint>
#include <string>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"

namespace tessera::testing {

// 2 channels, width 4, one block of hidden width 8 on nlat x nlon cells, normalised with
// mean (1, -2) and std (2, 0.5) so that predict() has work to do.
inline models::FieldEmulatorConfig small_emulator_config(std::int64_t nlat, std::int64_t nlon) {
  models::FieldEmulatorConfig c;
  c.channels = 2;
  c.width = 4;
  c.mlp_hidden = 8;
  c.n_blocks = 1;
  c.nlat = nlat;
  c.nlon = nlon;
  c.mean = {1.0, -2.0};
  c.std = {2.0, 0.5};
  return c;
}

// 2 channels, width 8, two blocks of hidden width 8 on 10 x 16 cells, latitude padding
// across the pole.
inline models::FieldEmulatorConfig domain_emulator_config() {
  models::FieldEmulatorConfig c;
  c.channels = 2;
  c.width = 8;
  c.mlp_hidden = 8;
  c.n_blocks = 2;
  c.nlat = 10;
  c.nlon = 16;
  c.pole = domain::PolePolicy::across_pole;
  return c;
}

// Saves `model` at `root` (collective over `mesh`) with its configuration in the
// metadata, so that load_model and the C API's tessera_model_load can build it back.
inline void save_emulator(const std::string& root, const Mesh& mesh, models::FieldEmulator& model,
                          std::int64_t step) {
  io::SaveOptions options;
  options.step = step;
  options.metadata = models::model_metadata(model.config());
  io::save_checkpoint(root, mesh, model, nullptr, options);
}

}  // namespace tessera::testing
