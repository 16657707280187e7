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
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::run {

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  virtual nn::Module& model() = 0;
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

// Preemption (docs/driver.md, "Signals: preemption and requeue"). SIGTERM (what Slurm
// sends on preemption, scancel and at the time limit) and SIGUSR1 (the warning that
// `sbatch --signal=B:USR1@N` sends before the time limit) only set a flag; the training
// loop agrees on it across ranks at every step boundary (one MAX all-reduce of one value
// over the world), so every rank stops after the same step, saves a checkpoint there (when
// checkpoint.dir is set) and returns kExitRequeue. A second signal while saving changes
// nothing (the flag is already set; the save finishes, and is atomic anyway). Installed
// with SA_RESTART, so no system call in MPI or HDF5 sees EINTR. Call once, after MPI_Init.
// The signals of --stop-signals ("TERM,USR1", names with or without SIG); InvalidArgument
// naming an unknown one.
std::vector<int> parse_stop_signals(const std::string& list);
void install_stop_signal_handlers(const std::vector<int>& signals);
// The signal that asked the run to stop (0: none yet). Async-signal-safe to set.
int stop_signal_received();

// The exit status of a run stopped by a signal after saving its checkpoint: 75
// (EX_TEMPFAIL, "try again"). The sbatch scripts in examples/slurm requeue the job on it
// and the requeued job resumes (resume: latest_or_start). A run stopped by a signal with
// no checkpoint.dir exits with 128 + the signal number instead, like a killed process.
inline constexpr int kExitRequeue = 75;

// Test hook (--kill-during-save N): while step N's checkpoint is being written, every
// rank is killed (SIGKILL, from inside its first write past a tiny file-size limit), as a
// job killed in the middle of a save would be. Set before run_training.
void set_kill_during_save(std::int64_t step);

// Trains `task` for the schedule of `cfg` on `mesh`; `data_parallel` is the model's
// dp::DataParallel or null. Collective over the mesh's world; returns the exit status
// (0, or kExitRequeue / 128 + signal after a stop signal; see above).
int run_training(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
                 dp::DataParallel* data_parallel);

}  // namespace tessera::run
