#pragma once
// tessera-run's decoder training (model.type: decoder, docs/driver.md): the Llama-style
// decoder of models/decoder.hpp on a token stream (token_data.hpp), tensor-parallel by
// models::parallelize_decoder (with sequence parallelism unless the embeddings are tied;
// grouped-query key/value heads split over tp or repeated),
// data-parallel through dp::DataParallel, next-token cross-entropy
// (tp::vocab_parallel_cross_entropy), AdamW or SGD, gradient clipping, checkpoints that
// carry the architecture, and resume.

#include <string>

#include "driver_common.hpp"
#include "run_config.hpp"
#include "tessera/models/decoder.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int train_decoder(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
