#include "training_loop.hpp"

#include "stop_signals.hpp"

#include "metrics.hpp"
#include "run_start.hpp"

#include <cerrno>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tessera/agree.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/error.hpp"
#include "tessera/io/async_checkpoint.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/lora.hpp"
#include "tessera/train/training_step.hpp"

namespace tessera::run {
namespace {

void check_checkpoint_dir_writable(const RunConfig& cfg, const Mesh& mesh) {
  if (cfg.checkpoint.dir.empty()) return;
  agree_on_success(mesh.world().mpi_comm(), [&] {
    namespace fs = std::filesystem;
    const fs::path dir(cfg.checkpoint.dir);
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path probe = dir / (".tessera-write-probe." + std::to_string(mesh.global_rank()));
    std::FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "w");
    const std::string reason = ec ? ec.message() : (f == nullptr ? std::strerror(errno) : "");
    if (f != nullptr) std::fclose(f);
    fs::remove(probe, ec);
    if (!reason.empty()) {
      throw IoError(cfg.source + ": checkpoint.dir '" + cfg.checkpoint.dir + "' is not writable (" + reason +
                    "); fix it before training, or leave checkpoint.dir empty to train without checkpoints");
    }
    // What killed saves left behind (unfinished step directories) goes now.
    if (mesh.global_rank() == 0) {
      if (const int removed = io::remove_stale_checkpoint_temporaries(cfg.checkpoint.dir)) {
        std::printf("checkpoint: removed %d unfinished save(s) left in '%s' by an earlier job\n", removed,
                    cfg.checkpoint.dir.c_str());
      }
    }
  });
}

// "1h02m03s", "4m05s", "12.3s": the ETA of the progress lines.
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  char buffer[64];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm%02llds", s / 3600, s / 60 % 60, s % 60);
  } else if (s >= 60) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1fs", seconds);
  }
  return buffer;
}

// "grid points" -> "grid_points": the throughput unit as a metrics key.
std::string json_key(const std::string& unit) {
  std::string key = unit;
  for (char& c : key) {
    if (c == ' ') c = '_';
  }
  return key;
}

// What evaluation goes through: the validation samples in order (no shuffle), each dp
// replica its share. The sampler drops the last (count mod dp) samples, so every replica
// evaluates as many (its batches are collectives over tp and domain, and fsdp2 gathers
// over dp) and each counted sample is counted once.
struct Validation {
  std::int64_t samples = 0;    // of the task (0: no validation)
  std::int64_t evaluated = 0;  // over all dp replicas
};

Validation plan_validation(const RunConfig& cfg, const Mesh& mesh, const TrainingTask& task) {
  Validation v;
  v.samples = task.validation_samples();
  if (v.samples == 0) return v;
  if (v.samples < mesh.dp_size()) {
    throw ConfigError(cfg.source + ": data.validation leaves " + std::to_string(v.samples) +
                      " validation samples, fewer than the " + std::to_string(mesh.dp_size()) +
                      " data-parallel replicas that evaluate them; hold out more");
  }
  v.evaluated = v.samples / mesh.dp_size() * mesh.dp_size();
  return v;
}

// The sample-weighted mean loss over the validation samples (and the baseline's), the
// same on every rank. Forward passes only: no gradient changes.
TrainingTask::Evaluation evaluate(const Validation& v, const Mesh& mesh, TrainingTask& task, std::int64_t batch) {
  dp::DistributedSampler sampler(v.samples, mesh, {.shuffle = false, .seed = 0, .drop_last = true});
  double sums[3] = {0, 0, 0};
  const std::int64_t batches = sampler.num_batches(batch);
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::vector<std::int64_t> ids = sampler.batch(b, batch);
    const TrainingTask::Evaluation e = task.evaluate(ids);
    const auto n = static_cast<double>(ids.size());
    sums[0] += e.loss * n;
    sums[1] += e.baseline * n;
    sums[2] += n;
  }
  Tensor t = Tensor::from_vector(std::vector<double>{sums[0], sums[1], sums[2]}, {3});
  mesh.dp().all_reduce(t, ReduceOp::sum);
  const auto s = t.to_vector<double>();
  return {s[0] / s[2], s[1] / s[2]};
}

// The "run:" mapping of the checkpoint metadata (the task appends its own keys). Its
// bytes are part of every checkpoint: keep the order and spelling.
std::string run_section(const RunConfig& cfg, const TrainingTask& task) {
  return "run:\n  config: \"" + cfg.source + "\"\n  seed: " + std::to_string(cfg.schedule.seed) +
         "\n  batch_size: " + std::to_string(cfg.data.batch_size) +
         "\n  accumulate: " + std::to_string(cfg.optimizer.accumulate) +
         "\n  precision: " + std::string(precision_name(cfg.precision)) +
         "\n  reduce_dtype: " + reduce_dtype_key(cfg.optimizer.reduce_dtype) + "\n" + task.extra_run_keys();
}

// What one training step yields for the progress lines.
struct StepOutcome {
  double loss = 0, baseline = 0;  // means over the step's micro-batches, this rank's
  double seconds = 0;             // timed compute and communication
  double lr = 0, grad_norm = NAN;
  bool logged = false;            // a progress line follows this step
};

// The steps since the last progress line. Each dp replica saw its own part of the
// global batches, so the means are averaged over dp.
class ProgressWindow {
 public:
  void add(const StepOutcome& s) {
    loss_ += s.loss;
    baseline_ += s.baseline;
    seconds_ += s.seconds;
    ++steps_;
  }
  struct Means {
    double loss, baseline, step_time;
  };
  // Collective over dp; empties the window.
  Means close(const Mesh& mesh) {
    Tensor sums = Tensor::from_vector(std::vector<double>{loss_, baseline_}, {2});
    mesh.dp().all_reduce(sums, ReduceOp::avg);
    const auto v = sums.to_vector<double>();
    const auto n = static_cast<double>(steps_);
    const Means means{v[0] / n, v[1] / n, seconds_ / n};
    loss_ = baseline_ = seconds_ = 0;
    steps_ = 0;
    return means;
  }

 private:
  double loss_ = 0, baseline_ = 0, seconds_ = 0;
  std::int64_t steps_ = 0;
};

// One run of the loop: set up once by run(), then step by step. The member functions
// are the loop's phases, in the order each step runs them.
class TrainingRun {
 public:
  TrainingRun(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
              dp::DataParallel* data_parallel)
      : cfg_(cfg),
        opts_(opts),
        log_(log),
        mesh_(mesh),
        task_(task),
        data_parallel_(data_parallel),
        // The step itself is the library's, the same as the C/Fortran trainer's.
        training_step_(cfg.optimizer, cfg.schedule.steps, mesh, task.model(), data_parallel),
        local_batch_(cfg.data.batch_size / mesh.dp_size()),  // one micro-batch
        accumulate_(cfg.optimizer.accumulate),
        samples_per_step_(cfg.data.batch_size * cfg.optimizer.accumulate) {
    training_step_.set_gradients_summed_over_domain(task.gradients_summed_over_domain());
  }

  int run() {
    check_checkpoint_dir_writable(cfg_, mesh_);
    start_async_saver();
    start_step_ = resume_or_init(cfg_, log_, mesh_, task_, &training_step_.optimizer());
    if (start_step_ >= cfg_.schedule.steps) {
      log_.info("nothing to do: the run is at step " + std::to_string(start_step_) + " of " +
                std::to_string(cfg_.schedule.steps));
      return 0;
    }
    prepare();
    const int signal = train();
    finish_background_save();  // the last checkpoint is committed before the run reports it
    if (signal != 0) return report_stop(signal);
    report_summary();
    return 0;
  }

 private:
  // The sampler, the validation plan, the metrics file and the run's first lines.
  void prepare() {
    sampler_.emplace(task_.samples(), mesh_,
                     dp::SamplerOptions{.shuffle = cfg_.data.shuffle, .seed = cfg_.schedule.seed, .drop_last = true});
    // A step takes `accumulate` consecutive micro-batches of the rank's epoch order: the
    // same samples as one batch of batch_size x accumulate.
    steps_per_epoch_ = sampler_->num_batches(local_batch_ * accumulate_, /*drop_last_batch=*/true);
    if (steps_per_epoch_ < 1) {
      throw ConfigError(cfg_.source + ": data.batch_size " + std::to_string(cfg_.data.batch_size) +
                        (accumulate_ > 1 ? " x optimizer.accumulate " + std::to_string(accumulate_) : std::string()) +
                        " leaves no full step per epoch of the " + std::to_string(task_.samples()) +
                        " training samples");
    }
    validation_ = plan_validation(cfg_, mesh_, task_);

    // The metrics file: appended to by a resumed run, started afresh otherwise.
    if (!cfg_.metrics_file.empty()) {
      agree_on_success(mesh_.world().mpi_comm(),
                       [&] { metrics_.open(cfg_.metrics_file, mesh_.global_rank() == 0, start_step_ > 0); });
    }
    log_.info("training: steps " + std::to_string(start_step_ + 1) + ".." + std::to_string(cfg_.schedule.steps) +
              ", " + cfg_.optimizer.type + " lr " + fmt("%g", cfg_.optimizer.lr) + ", seed " +
              std::to_string(cfg_.schedule.seed) +
              (accumulate_ > 1 ? ", " + std::to_string(accumulate_) + " micro-batches of " +
                                     std::to_string(cfg_.data.batch_size) + " per step (" +
                                     std::to_string(samples_per_step_) + " samples)"
                               : std::string()));

    baseline_ = task_.baseline_name();
    unit_ = task_.throughput_unit();
    unit_key_ = json_key(unit_) + "_per_s";
    units_per_step_ = task_.units_per_sample() * static_cast<double>(samples_per_step_);
    metrics_.write(JsonRecord("run")
                       .add("model", cfg_.model_type)
                       .add("config", cfg_.source)
                       .add("start_step", start_step_)
                       .add("steps", cfg_.schedule.steps)
                       .add("world_size", mesh_.world_size())
                       .add("dp", mesh_.dp_size())
                       .add("tp", mesh_.tp_size())
                       .add("domain", mesh_.domain_size())
                       .add("batch_size", cfg_.data.batch_size)
                       .add("accumulate", accumulate_)
                       .add("precision", std::string(precision_name(cfg_.precision)))
                       .add("reduce_dtype", reduce_dtype_key(cfg_.optimizer.reduce_dtype))
                       .add("samples_per_step", samples_per_step_)
                       .add("train_samples", task_.samples())
                       .add("validation_samples", validation_.samples)
                       .add("baseline_name", baseline_));
    // A file that cannot take one line (a full disk, /dev/full) fails before any step.
    agree_on_success(mesh_.world().mpi_comm(), [&] { metrics_.check_complete(); });
  }

  // The steps; returns the agreed stop signal (0: ran to the end).
  int train() {
    loop_start_ = std::chrono::steady_clock::now();
    for (std::int64_t step = start_step_ + 1; step <= cfg_.schedule.steps; ++step) {
      const StepOutcome outcome = run_step(step);
      window_.add(outcome);
      run_time_ += outcome.seconds;
      if (outcome.logged) report_progress(step, outcome);
      const bool final_step = step == cfg_.schedule.steps;
      maybe_validate(step, final_step);
      maybe_checkpoint(step, final_step);
      if (opts_.kill_after_step == step) {
        log_.info("--kill-after-step " + std::to_string(step) + ": killing every rank");
        std::raise(SIGKILL);
      }
      if (final_step) break;
      if (const int signal = agree_stop(step)) return signal;
    }
    return 0;
  }

  // One optimizer step: `accumulate` micro-batches of forward/backward, then the
  // reductions, clipping and update.
  StepOutcome run_step(std::int64_t step) {
    const std::int64_t position = step - 1;
    sampler_->set_epoch(position / steps_per_epoch_);
    const std::int64_t first_micro_batch = (position % steps_per_epoch_) * accumulate_;

    // Timed: the compute and communication of the step, not the reading of its batches
    // nor the baselines. The barrier makes it the slowest rank's time, not rank 0's share.
    StepOutcome s;
    const auto timed = [&](auto&& work) {
      const auto t0 = std::chrono::steady_clock::now();
      work();
      s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    mesh_.world().barrier();
    timed([&] { training_step_.begin(); });
    for (std::int64_t micro = 0; micro < accumulate_; ++micro) {
      task_.load_batch(sampler_->batch(first_micro_batch + micro, local_batch_));
      training_step_.before_backward(micro);
      double micro_loss = 0;
      timed([&] { micro_loss = task_.forward_backward(); });
      s.loss += micro_loss;
      // Named now, while the batch is loaded: a divergence report blames it, not the lr.
      if (!std::isfinite(micro_loss)) training_step_.note_non_finite_loss(step, task_.batch_problem(step));
      s.baseline += task_.baseline();
    }
    s.logged = step % cfg_.schedule.log_every == 0 || step == cfg_.schedule.steps;
    s.lr = training_step_.learning_rate(step);
    timed([&] { s.grad_norm = training_step_.finish(step, s.logged); });
    s.loss /= static_cast<double>(accumulate_);
    s.baseline /= static_cast<double>(accumulate_);
    return s;
  }

  // The progress line and the metrics record of the window that ends at `step`.
  void report_progress(std::int64_t step, const StepOutcome& s) {
    const ProgressWindow::Means means = window_.close(mesh_);
    last_loss_ = means.loss;
    last_baseline_ = means.baseline;
    if (std::isnan(first_loss_)) {
      first_loss_ = last_loss_;
      first_baseline_ = last_baseline_;
    }
    const double step_time = means.step_time;
    // The ETA from the wall time of the steps so far (evaluations and saves included).
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start_).count();
    const double eta =
        wall / static_cast<double>(step - start_step_) * static_cast<double>(cfg_.schedule.steps - step);
    const double samples_per_s = static_cast<double>(samples_per_step_) / step_time;
    char line[512];
    std::snprintf(line, sizeof line,
                  "step %6lld/%lld  loss %.6e  %s %.6e  lr %.3e  grad_norm %.3e  step %.1f ms  %.1f samples/s  "
                  "%.3e %s/s  eta %s",
                  static_cast<long long>(step), static_cast<long long>(cfg_.schedule.steps), last_loss_,
                  baseline_.c_str(), last_baseline_, s.lr, s.grad_norm, 1e3 * step_time, samples_per_s,
                  units_per_step_ / step_time, unit_.c_str(), format_duration(eta).c_str());
    log_.info(line);
    metrics_.write(JsonRecord("train")
                       .add("step", step)
                       .add("loss", last_loss_)
                       .add("baseline", last_baseline_)
                       .add("lr", s.lr)
                       .add("grad_norm", s.grad_norm)
                       .add("step_time_s", step_time)
                       .add("samples_per_s", samples_per_s)
                       .add(unit_key_, units_per_step_ / step_time)
                       .add("eta_s", eta)
                       .add("epoch", (step - 1) / steps_per_epoch_));
  }

  // Validation after the final step and every schedule.eval_every steps.
  void maybe_validate(std::int64_t step, bool final_step) {
    if (validation_.samples == 0) return;
    if (!final_step && (cfg_.schedule.eval_every <= 0 || step % cfg_.schedule.eval_every != 0)) return;
    const auto e0 = std::chrono::steady_clock::now();
    const TrainingTask::Evaluation e = evaluate(validation_, mesh_, task_, local_batch_);
    if (data_parallel_) data_parallel_->finish_evaluation();
    const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    last_val_loss_ = e.loss;
    char line[512];
    std::snprintf(line, sizeof line, "validation step %lld/%lld  val_loss %.6e  %s %.6e  (%lld samples, %.1f ms)",
                  static_cast<long long>(step), static_cast<long long>(cfg_.schedule.steps), e.loss,
                  baseline_.c_str(), e.baseline, static_cast<long long>(validation_.evaluated), 1e3 * eval_seconds);
    log_.info(line);
    metrics_.write(JsonRecord("validation")
                       .add("step", step)
                       .add("val_loss", e.loss)
                       .add("baseline", e.baseline)
                       .add("samples", validation_.evaluated)
                       .add("time_s", eval_seconds));
  }

  // A checkpoint after the final step and every checkpoint.interval steps.
  void maybe_checkpoint(std::int64_t step, bool final_step) {
    if (cfg_.checkpoint.dir.empty()) return;
    if (!final_step && (cfg_.checkpoint.interval <= 0 || step % cfg_.checkpoint.interval != 0)) return;
    save(step);
  }

  void save(std::int64_t step) {
    io::SaveOptions so;
    so.layout = cfg_.checkpoint.layout;
    so.step = step;
    so.keep_last = cfg_.checkpoint.keep_last;
    so.metadata = task_.checkpoint_metadata(run_section(cfg_, task_));
    // One save in flight at most: the previous background write is committed before the
    // next snapshot (and before --kill-during-save arms, so the kill hits this save).
    if (async_saver_) finish_background_save();
    if (kill_during_save_due(step)) {
      log_.info("--kill-during-save " + std::to_string(step) + ": killing every rank during this save");
      arm_kill_during_save(cfg_.checkpoint.dir, step);
    }
    last_saved_step_ = step;
    if (async_saver_) {
      const io::AsyncSaveStarted started =
          async_saver_->save(cfg_.checkpoint.dir, task_.model(), &training_step_.optimizer(), so);
      log_.info("checkpoint: " + started.directory + " (" + std::string(io::checkpoint_layout_name(so.layout)) +
                "): snapshot of " + fmt("%.1f", static_cast<double>(started.snapshot_bytes) / (1 << 20)) +
                " MiB in " + fmt("%.1f", 1e3 * started.snapshot_seconds) + " ms; writing in the background");
      return;
    }
    const std::string dir = io::save_checkpoint(cfg_.checkpoint.dir, mesh_, task_.model(),
                                                &training_step_.optimizer(), so);
    log_.info("checkpoint: " + dir + " (" + std::string(io::checkpoint_layout_name(cfg_.checkpoint.layout)) + ")");
    last_checkpoint_ = dir;
  }

  // checkpoint.async: the saver, after its check of MPI's thread level. Its writer logs
  // each commit (rank 0's Log prints; a whole line per call).
  void start_async_saver() {
    if (!cfg_.checkpoint.async || cfg_.checkpoint.dir.empty()) return;
    const Log& log = log_;
    async_saver_.emplace(mesh_, [&log](const io::AsyncSaveFinished& f) {
      log.info("checkpoint: " + f.directory + " committed (written in the background in " +
               fmt("%.1f", 1e3 * f.write_seconds) + " ms)");
    });
  }

  // Waits for the background save in flight, if any, saying how long the loop stood
  // still for it; its error (the same on every rank) ends the run here.
  void finish_background_save() {
    if (!async_saver_ || !async_saver_->in_flight()) return;
    const auto t0 = std::chrono::steady_clock::now();
    last_checkpoint_ = async_saver_->wait();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log_.info("checkpoint: waited " + fmt("%.1f", 1e3 * waited) + " ms for the background save of " +
              last_checkpoint_ + " to finish");
  }

  // The step boundary: did any rank get a stop signal? One MAX all-reduce of one value,
  // so every rank stops after this same step (a rank signalled a moment later than the
  // others stops with them, not one step later). Saves the step when stopping. Returns
  // the signal (0: none).
  int agree_stop(std::int64_t step) {
    Tensor flag = Tensor::from_vector(std::vector<double>{static_cast<double>(stop_signal_received())}, {1});
    mesh_.world().all_reduce(flag, ReduceOp::max);
    const int stopped_by = static_cast<int>(flag.to_vector<double>()[0]);
    if (stopped_by == 0) return 0;
    log_.info(std::string("signal: ") + signal_name(stopped_by) + " received; stopping after step " +
              std::to_string(step) + " of " + std::to_string(cfg_.schedule.steps));
    if (!cfg_.checkpoint.dir.empty() && last_saved_step_ != step) save(step);
    stopped_at_step_ = step;
    return stopped_by;
  }

  // The exit status after a stop signal: requeue when the stop step is saved.
  int report_stop(int stopped_by) const {
    if (cfg_.checkpoint.dir.empty()) {
      log_.warn(std::string("stopped by ") + signal_name(stopped_by) +
                " with no checkpoint.dir: nothing saved; exiting with status " + std::to_string(128 + stopped_by));
      return 128 + stopped_by;
    }
    log_.info("signal: stopped at step " + std::to_string(stopped_at_step_) + " with checkpoint " +
              last_checkpoint_ + "; exiting with status " + std::to_string(kExitRequeue) +
              " (requeue me: resume: latest_or_start continues from it)");
    return kExitRequeue;
  }

  void report_summary() {
    const std::int64_t steps_run = cfg_.schedule.steps - start_step_;
    const double step_time = run_time_ / static_cast<double>(steps_run);
    char line[512];
    std::snprintf(line, sizeof line,
                  "summary: %lld steps (%lld..%lld) in %.2f s: %.1f ms/step, %.1f samples/s, %.3e %s/s",
                  static_cast<long long>(steps_run), static_cast<long long>(start_step_ + 1),
                  static_cast<long long>(cfg_.schedule.steps), run_time_, 1e3 * step_time,
                  static_cast<double>(samples_per_step_) / step_time, units_per_step_ / step_time, unit_.c_str());
    log_.info(line);
    log_.info("summary: first logged loss " + fmt("%.6e", first_loss_) + " (" +
              task_.first_loss_context(first_baseline_) + ")");
    std::snprintf(line, sizeof line,
                  "summary: final loss %.6e %s %.6e ratio %.4f (%s the %s baseline; mean of the last logged window)",
                  last_loss_, baseline_.c_str(), last_baseline_, last_loss_ / last_baseline_,
                  last_loss_ < last_baseline_ ? "below" : "NOT below", baseline_.c_str());
    log_.info(line);
    if (validation_.samples > 0) log_.info("summary: final validation loss " + fmt("%.6e", last_val_loss_));
    if (!last_checkpoint_.empty()) log_.info("summary: last checkpoint " + last_checkpoint_);
    metrics_.write(JsonRecord("summary")
                       .add("steps_run", steps_run)
                       .add("time_s", run_time_)
                       .add("final_loss", last_loss_)
                       .add("final_baseline", last_baseline_)
                       .add("final_val_loss", last_val_loss_));
    agree_on_success(mesh_.world().mpi_comm(), [&] { metrics_.check_complete(); });
  }

  const RunConfig& cfg_;
  const Options& opts_;
  const Log& log_;
  const Mesh& mesh_;
  TrainingTask& task_;
  dp::DataParallel* const data_parallel_;
  train::TrainingStep training_step_;
  const std::int64_t local_batch_, accumulate_, samples_per_step_;

  std::int64_t start_step_ = 0;
  std::optional<dp::DistributedSampler> sampler_;
  std::int64_t steps_per_epoch_ = 0;
  Validation validation_;
  MetricsFile metrics_;
  std::string baseline_, unit_, unit_key_;
  double units_per_step_ = 0;

  std::chrono::steady_clock::time_point loop_start_;
  ProgressWindow window_;
  double run_time_ = 0;
  double last_loss_ = NAN, last_baseline_ = NAN, first_loss_ = NAN, first_baseline_ = NAN, last_val_loss_ = NAN;
  std::string last_checkpoint_;  // committed (a background save's once waited for)
  std::int64_t last_saved_step_ = -1;
  std::int64_t stopped_at_step_ = 0;
  std::optional<io::AsyncCheckpointer> async_saver_;  // checkpoint.async
};

}  // namespace

int run_training(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
                 dp::DataParallel* data_parallel) {
  return TrainingRun(cfg, opts, log, mesh, task, data_parallel).run();
}

}  // namespace tessera::run
