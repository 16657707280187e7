#pragma once
// Where a training run starts (run_start.cpp): resume, init_weights or step 0.

#include <cstdint>

#include "training_loop.hpp"

namespace tessera::run {

// The step the run continues after: a resumed checkpoint's (its weights and optimizer
// state loaded), else 0 (after loading init_weights' weights when given). Collective.
std::int64_t resume_or_init(const RunConfig& cfg, const Log& log, const Mesh& mesh, TrainingTask& task,
                            Optimizer* optimizer);

}  // namespace tessera::run
