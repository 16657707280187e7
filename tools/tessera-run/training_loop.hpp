#pragma once
// tessera-run's one training loop, whatever the model (docs/driver.md). A model type
// brings a TrainingTask: its model (already parallelised and initialised), its data,
// its loss and the baseline it is judged against; the loop does the rest the same way
// for every model: the optimizer, resume (after checking the saved architecture), the
// distributed sampler, the step (optimizer.accumulate micro-batches of forward/backward,
// the dp, tp and domain gradient reductions once per step, clipping, the learning-rate
// schedule), validation (data.validation, every schedule.eval_every steps), the progress
// lines and the metrics file, checkpoints and the summary.

#include <cstdint>
#include <string>
#include <vector>

#include "driver_common.hpp"
#include "run_config.hpp"
#include "stop_signals.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::run {

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  virtual nn::Module& model() = 0;
  // Whether the model's backward already sums its parameters' gradients over the mesh's
  // domain group (an imported graph split over it), so the step must not sum them again.
  virtual bool gradients_summed_over_domain() const { return false; }
  // The number of training samples the sampler draws from (without the held-out part).
  virtual std::int64_t samples() const = 0;
  // The number of validation samples (data.validation; 0 without), numbered from 0.
  virtual std::int64_t validation_samples() const = 0;

  // Throws ConfigError when a checkpoint's metadata describes another architecture
  // (checked before any weight is read: the same FQNs could hold other shapes).
  virtual void check_saved_model(const io::CheckpointMetadata& header) const = 0;
  // The checkpoint metadata: the model's description followed by `run_section` (the
  // loop's "run:" mapping, to which extra_run_keys() was appended).
  virtual std::string checkpoint_metadata(const std::string& run_section) const = 0;
  // The task's own lines of the "run:" mapping ("  lead: 1\n").
  virtual std::string extra_run_keys() const = 0;

  // Reads these samples of the local batch onto the mesh's device (not timed).
  virtual void load_batch(const std::vector<std::int64_t>& samples) = 0;
  // After a loss that is not finite: a sentence naming the first NaN or Inf of the loaded
  // batch (input or target, the file, the sample and place), "" when it holds none
  // (tokens never do). Local.
  virtual std::string batch_problem(std::int64_t /*step*/) const { return ""; }
  // Forward, loss and backward on the loaded batch: every parameter's gradient holds
  // this rank's part, before any reduction. Returns the loss.
  virtual double forward_backward() = 0;
  // The baseline's loss on the loaded batch (not timed).
  virtual double baseline() = 0;
  // Evaluation: the loss of a forward pass on these validation samples and the
  // baseline's, without backward (no gradient changes). Collective like forward.
  struct Evaluation {
    double loss = 0, baseline = 0;
  };
  virtual Evaluation evaluate(const std::vector<std::int64_t>& validation_samples) = 0;

  // How the progress lines name things: the baseline ("persistence"), the throughput
  // unit ("grid points") and how many of them a sample holds.
  virtual std::string baseline_name() const = 0;
  virtual std::string throughput_unit() const = 0;
  virtual double units_per_sample() const = 0;
  // What the summary adds in brackets after the first logged loss, given the first
  // logged window's baseline ("persistence 3.2e-02").
  virtual std::string first_loss_context(double first_baseline) const = 0;
};

// Trains `task` for the schedule of `cfg` on `mesh`; `data_parallel` is the model's
// dp::DataParallel or null. Collective over the mesh's world; returns the exit status
// (0, or kExitRequeue / 128 + signal after a stop signal; see above).
int run_training(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
                 dp::DataParallel* data_parallel);

}  // namespace tessera::run
