#pragma once
// tessera-run's configuration is the library's (include/tessera/train/run_config.hpp:
// the keys of docs/driver.md, parsed by the same code as the C/Fortran trainer's); the
// driver uses its names unqualified.

#include "tessera/train/run_config.hpp"

namespace tessera::run {

using train::CheckpointConfig;
using train::DataConfig;
using train::DecoderRunConfig;
using train::learning_rate_at;
using train::log_level_name;
using train::LogLevel;
using train::OptimizerConfig;
using train::parse_run_config;
using train::parse_run_config_text;
using train::PipelineRunConfig;
using train::PredictConfig;
using train::RunConfig;
using train::ScheduleConfig;
using train::ValidationSplit;

}  // namespace tessera::run
