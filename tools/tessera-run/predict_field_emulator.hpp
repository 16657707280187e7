#pragma once
// `tessera-run predict CONFIG.yaml` (docs/driver.md, "netCDF") for the field emulator:
// loads its checkpoint at the config's layout (any tp and domain split: load_model
// reshards) and writes the rollout (predict_rollout.hpp).

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int predict_field_emulator(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
