#pragma once
// tessera-run's imported graph (model.type: onnx; docs/driver.md, "Your own model:
// ONNX"): an ONNX file (onnx_field_model.hpp) trained on the field emulator's data, loss
// (the latitude-weighted MSE to the state `data.lead` steps ahead), baseline
// (persistence), optimizer, schedule and checkpoints through the one training loop
// (training_loop.hpp), data-parallel (ddp) and domain-parallel over latitude bands. The
// initial weights are the file's. model.export writes the graph with the trained
// weights at the end.

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int train_onnx_model(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
