#pragma once
// tessera-run's field emulator (model.type: field_emulator, the default; docs/driver.md):
// models/field_emulator.hpp on a gridded dataset (field_data.hpp) over a (dp, tp,
// domain) mesh, trained by the one training loop (training_loop.hpp) on the
// latitude-weighted MSE to the state `data.lead` steps ahead, judged against
// persistence (predicting "no change").

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int train_field_emulator(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
