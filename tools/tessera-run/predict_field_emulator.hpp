#pragma once
// `tessera-run predict CONFIG.yaml` (docs/driver.md, "netCDF"): loads a field-emulator
// checkpoint at the config's layout (any tp and domain split: load_model reshards),
// reads the initial condition (time index predict.initial_time of data.path, either
// format) for each rank's latitude band, rolls the model forward predict.steps times
// on its own output, and writes the initial state and every step to a CF netCDF-4 file
// (predict.output), each band written by the rank that computed it (netcdf_output.hpp).

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int predict_field_emulator(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
