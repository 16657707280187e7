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

// The decoder's architecture as the YAML mapping stored under `model:` in a checkpoint's
// metadata ("type: decoder\nvocab: 64\n..."; eps with 17 significant digits).
std::string decoder_yaml(const models::DecoderConfig& config);
// Reads it back from a checkpoint's metadata text; a model of another type, a missing
// or unknown key is a ConfigError naming it and `source`.
models::DecoderConfig decoder_from_metadata(const std::string& metadata, const std::string& source);

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int train_decoder(const RunConfig& cfg, const Options& opts);

}  // namespace tessera::run
