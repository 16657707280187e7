#pragma once
// `tessera-run predict CONFIG.yaml` for model.type: onnx: the graph of model.path with
// the weights of a tessera-run checkpoint of it (predict.checkpoint, else checkpoint.dir),
// on the data description the checkpoint recorded (variables, grid, normalisation, time
// step), whole on every rank or split over latitude bands (parallelism.domain), rolled
// out and written like the field emulator's (predict_rollout.hpp).

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int predict_onnx_model(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
