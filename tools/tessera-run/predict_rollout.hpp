#pragma once
// The rollout of `tessera-run predict`, whatever the model (predict_field_emulator.cpp,
// predict_onnx_model.cpp): reads the initial condition (time index predict.initial_time
// of data.path, either format) for each rank's latitude band, rolls the model forward
// predict.steps times on its own output, and writes the initial state and every step to
// a CF netCDF-4 file (predict.output), each band written by the rank that computed it
// (netcdf_output.hpp), on the input's grid, coordinates and orientation.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driver_common.hpp"
#include "run_config.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/mesh.hpp"
#include "tessera/tensor.hpp"

namespace tessera::run {

// predict.output may be replaced (--force) or does not exist: checked on every rank
// before the mesh is built.
void check_predict_output(const RunConfig& cfg, const Options& opts);
// predict.checkpoint, else checkpoint.dir (ConfigError naming both when neither is set).
std::string predict_checkpoint(const RunConfig& cfg);

// What the rollout needs of a trained model.
struct RolloutModel {
  std::string description;             // the log's and the file's `source`
  std::string title = "tessera field emulator rollout";
  std::vector<std::string> variables;  // the channels it was trained on (empty: unknown)
  std::int64_t channels = 0, nlat = 0, nlon = 0;
  domain::LatitudeSpec latitude_spec;
  double dt_seconds = 0;               // one model step (0: unknown: data.lead snapshots)
  std::string checkpoint_file;
  std::int64_t checkpoint_step = 0;
  const domain::Decomposition* decomposition = nullptr;  // this rank's latitude band
  // The next state of a physical f32 [1, channels, band, nlon] on the mesh's device.
  std::function<Tensor(const Tensor&)> step;
};

// Collective over the mesh's world; returns the exit status (errors are thrown).
int write_rollout(const RunConfig& cfg, const Options& opts, const Mesh& mesh, const Log& log,
                  const RolloutModel& model);

}  // namespace tessera::run
