#include "training_loop.hpp"

#include "stop_signals.hpp"

#include "metrics.hpp"

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
#include "tessera/io/checkpoint.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/lora.hpp"
#include "tessera/train/training_step.hpp"

namespace tessera::run {
namespace {

// The checkpoint `resume` names (nullopt: start from step 0; logged). `latest` needs a
// committed checkpoint; `latest_or_start` starts from step 0 when the directory holds
// none. Either refuses a directory whose newest step cannot be identified (step
// directories without a `latest` pointer, or a broken pointer): starting over there
// would silently discard the run and, with keep_last, delete its checkpoints.
std::optional<std::string> resume_path(const RunConfig& cfg, const Log& log) {
  if (cfg.resume.empty()) return std::nullopt;
  if (cfg.resume != "latest" && cfg.resume != "latest_or_start") return cfg.resume;
  const std::string& dir = cfg.checkpoint.dir;
  if (auto path = io::latest_checkpoint(dir)) return path;  // IoError for a broken pointer
  const std::vector<std::string> steps = io::list_checkpoints(dir);
  if (!steps.empty()) {
    throw ConfigError("resume: " + cfg.resume + ": checkpoint.dir '" + dir + "' holds " +
                      std::to_string(steps.size()) + " step directories (the newest: " + steps.back() +
                      ") but no 'latest' pointer, so the step to resume from cannot be identified safely; "
                      "name one with resume: <path of a step directory>");
  }
  if (cfg.resume == "latest") {
    throw ConfigError("resume: latest, but checkpoint.dir '" + dir +
                      "' holds no checkpoint; use resume: latest_or_start to start from step 0 when there is none "
                      "(the first run of a job that is requeued)");
  }
  log.info("resume: no checkpoint in '" + dir + "' yet; starting from step 0 (resume: latest_or_start)");
  return std::nullopt;
}

// checkpoint.dir must be writable from every rank (per_rank checkpoints are written by
// every rank) before the first interval of compute is spent: creates it when missing,
// writes and removes a probe file. IoError naming the key, the directory and the reason.
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

// Loaded weights that are not finite train to a NaN loss, which reads as divergence
// ("lower optimizer.lr"): named here with the parameter and the file. Collective.
void check_loaded_weights(nn::Module& model, const std::string& key, const std::string& file, const Mesh& mesh) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    for (const auto& [name, p] : model.named_parameters()) {
      if (!p->value.defined() || p->value.numel() == 0 || p->value.dtype() != DType::f32) continue;
      const std::vector<float> v = p->value.to(Device::host()).contiguous().to_vector<float>();
      const auto bad = tessera::detail::first_non_finite(std::span<const float>(v));
      if (!bad) continue;
      throw ConfigError(key + ": parameter '" + name + "' of '" + file + "' holds " +
                        tessera::detail::non_finite_kind(v[*bad]) +
                        ": these weights cannot train (load an earlier step, or re-import them)");
    }
  });
}

}  // namespace


int run_training(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
                 dp::DataParallel* data_parallel) {
  nn::Module& model = task.model();
  // The step itself is the library's, the same as the C/Fortran trainer's.
  train::TrainingStep training_step(cfg.optimizer, cfg.schedule.steps, mesh, model, data_parallel);
  Optimizer* const optimizer = &training_step.optimizer();
  const std::int64_t local_batch = cfg.data.batch_size / mesh.dp_size();  // one micro-batch
  const std::int64_t accumulate = cfg.optimizer.accumulate;
  const std::int64_t samples_per_step = cfg.data.batch_size * accumulate;
  check_checkpoint_dir_writable(cfg, mesh);

  // ---- resume
  std::int64_t start_step = 0;
  std::optional<std::string> path;
  agree_on_success(mesh.world().mpi_comm(), [&] { path = resume_path(cfg, log); });
  if (path) {
    const io::CheckpointMetadata header = io::read_checkpoint_metadata(*path, mesh.world());
    task.check_saved_model(header);
    const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, model, optimizer);
    start_step = loaded.step;
    check_loaded_weights(model, "resume", loaded.file, mesh);
    log.info("resumed from " + loaded.file + " at step " + std::to_string(loaded.step) + " (saved at " +
             loaded.saved_mesh.str() + " on " + std::to_string(loaded.saved_world_size) + " ranks; now " +
             mesh.config().str() + " on " + std::to_string(mesh.world_size()) + ")");
  } else if (!cfg.init_weights.empty()) {
    // Weights only: the architecture must match, the optimizer state and step start fresh.
    const io::CheckpointMetadata header = io::read_checkpoint_metadata(cfg.init_weights, mesh.world());
    try {
      task.check_saved_model(header);
    } catch (const ConfigError& e) {
      // The tasks word their architecture check for resume; name the key used here.
      std::string what = e.what();
      if (what.rfind("resume: ", 0) == 0) what.erase(0, 8);
      throw ConfigError("init_weights: " + what);
    }
    // A pretrained base holds everything but LoRA adapters: those keep their init.
    io::LoadOptions lo;
    lo.strict = false;
    const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, model, nullptr, lo);
    // Agreed: with a pipeline each rank checks only its own stage's parameters, and a
    // stage failing alone would leave the others waiting in the first step.
    agree_on_success(mesh.world().mpi_comm(), [&] {
      for (const std::string& name : loaded.missing) {
        if (!tp::is_lora_adapter(name)) throw ConfigError("init_weights: '" + loaded.file + "' lacks " + name);
      }
      if (!loaded.unexpected.empty()) {
        throw ConfigError("init_weights: '" + loaded.file + "' holds " + loaded.unexpected.front() +
                          ", which the model lacks");
      }
    });
    check_loaded_weights(model, "init_weights", loaded.file, mesh);
    log.info("init_weights: model weights from " + loaded.file + " (its step " + std::to_string(loaded.step) +
             ", saved at " + loaded.saved_mesh.str() + "); optimizer state fresh, starting at step 0");
  }
  if (start_step >= cfg.schedule.steps) {
    log.info("nothing to do: the run is at step " + std::to_string(start_step) + " of " +
             std::to_string(cfg.schedule.steps));
    return 0;
  }

  dp::DistributedSampler sampler(task.samples(), mesh,
                                 {.shuffle = cfg.data.shuffle, .seed = cfg.schedule.seed, .drop_last = true});
  // A step takes `accumulate` consecutive micro-batches of the rank's epoch order: the
  // same samples as one batch of batch_size x accumulate.
  const std::int64_t steps_per_epoch = sampler.num_batches(local_batch * accumulate, /*drop_last_batch=*/true);
  if (steps_per_epoch < 1) {
    throw ConfigError(cfg.source + ": data.batch_size " + std::to_string(cfg.data.batch_size) +
                      (accumulate > 1 ? " x optimizer.accumulate " + std::to_string(accumulate) : std::string()) +
                      " leaves no full step per epoch of the " + std::to_string(task.samples()) + " training samples");
  }
  const Validation validation = plan_validation(cfg, mesh, task);

  // The metrics file: appended to by a resumed run, started afresh otherwise.
  MetricsFile metrics;
  if (!cfg.metrics_file.empty()) {
    agree_on_success(mesh.world().mpi_comm(),
                     [&] { metrics.open(cfg.metrics_file, mesh.global_rank() == 0, start_step > 0); });
  }

  const auto save = [&](std::int64_t step) {
    io::SaveOptions so;
    so.layout = cfg.checkpoint.layout;
    so.step = step;
    so.keep_last = cfg.checkpoint.keep_last;
    so.metadata = task.checkpoint_metadata("run:\n  config: \"" + cfg.source + "\"\n  seed: " +
                                           std::to_string(cfg.schedule.seed) + "\n  batch_size: " +
                                           std::to_string(cfg.data.batch_size) + "\n  accumulate: " +
                                           std::to_string(accumulate) + "\n  precision: " +
                                           std::string(precision_name(cfg.precision)) + "\n  reduce_dtype: " +
                                           reduce_dtype_key(cfg.optimizer.reduce_dtype) + "\n" +
                                           task.extra_run_keys());
    if (kill_during_save_due(step)) {
      log.info("--kill-during-save " + std::to_string(step) + ": killing every rank during this save");
      arm_kill_during_save(cfg.checkpoint.dir, step);
    }
    const std::string dir = io::save_checkpoint(cfg.checkpoint.dir, mesh, model, optimizer, so);
    log.info("checkpoint: " + dir + " (" + std::string(io::checkpoint_layout_name(cfg.checkpoint.layout)) + ")");
    return dir;
  };

  log.info("training: steps " + std::to_string(start_step + 1) + ".." + std::to_string(cfg.schedule.steps) + ", " +
           cfg.optimizer.type + " lr " + fmt("%g", cfg.optimizer.lr) + ", seed " +
           std::to_string(cfg.schedule.seed) +
           (accumulate > 1 ? ", " + std::to_string(accumulate) + " micro-batches of " +
                                 std::to_string(cfg.data.batch_size) + " per step (" +
                                 std::to_string(samples_per_step) + " samples)"
                           : std::string()));

  const std::string baseline = task.baseline_name(), unit = task.throughput_unit();
  const std::string unit_key = json_key(unit) + "_per_s";
  const double units_per_step = task.units_per_sample() * static_cast<double>(samples_per_step);
  metrics.write(JsonRecord("run")
                    .add("model", cfg.model_type)
                    .add("config", cfg.source)
                    .add("start_step", start_step)
                    .add("steps", cfg.schedule.steps)
                    .add("world_size", mesh.world_size())
                    .add("dp", mesh.dp_size())
                    .add("tp", mesh.tp_size())
                    .add("domain", mesh.domain_size())
                    .add("batch_size", cfg.data.batch_size)
                    .add("accumulate", accumulate)
                    .add("precision", std::string(precision_name(cfg.precision)))
                    .add("reduce_dtype", reduce_dtype_key(cfg.optimizer.reduce_dtype))
                    .add("samples_per_step", samples_per_step)
                    .add("train_samples", task.samples())
                    .add("validation_samples", validation.samples)
                    .add("baseline_name", baseline));
  // A file that cannot take one line (a full disk, /dev/full) fails before any step.
  agree_on_success(mesh.world().mpi_comm(), [&] { metrics.check_complete(); });

  double window_loss = 0, window_baseline = 0, window_time = 0, run_time = 0;
  std::int64_t window_steps = 0;
  double last_loss = NAN, last_baseline = NAN, first_loss = NAN, first_baseline = NAN, last_val_loss = NAN;
  std::string last_checkpoint;
  std::int64_t last_saved_step = -1;
  int stopped_by = 0;  // the agreed stop signal (0: none)
  std::int64_t stopped_at_step = 0;
  char line[512];
  const auto loop_start = std::chrono::steady_clock::now();

  for (std::int64_t step = start_step + 1; step <= cfg.schedule.steps; ++step) {
    const std::int64_t position = step - 1;
    sampler.set_epoch(position / steps_per_epoch);
    const std::int64_t first_micro_batch = (position % steps_per_epoch) * accumulate;

    // Timed: the compute and communication of the step, not the reading of its batches
    // nor the baselines. The barrier makes it the slowest rank's time, not rank 0's share.
    double seconds = 0, loss = 0, step_baseline = 0;
    const auto timed = [&](auto&& work) {
      const auto t0 = std::chrono::steady_clock::now();
      work();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    mesh.world().barrier();
    timed([&] { training_step.begin(); });
    for (std::int64_t micro = 0; micro < accumulate; ++micro) {
      task.load_batch(sampler.batch(first_micro_batch + micro, local_batch));
      training_step.before_backward(micro);
      double micro_loss = 0;
      timed([&] { micro_loss = task.forward_backward(); });
      loss += micro_loss;
      // Named now, while the batch is loaded: a divergence report blames it, not the lr.
      if (!std::isfinite(micro_loss)) training_step.note_non_finite_loss(step, task.batch_problem(step));
      step_baseline += task.baseline();
    }
    double grad_norm = NAN;
    const bool log_step = step % cfg.schedule.log_every == 0 || step == cfg.schedule.steps;
    const double lr = training_step.learning_rate(step);
    timed([&] { grad_norm = training_step.finish(step, log_step); });
    loss /= static_cast<double>(accumulate);
    step_baseline /= static_cast<double>(accumulate);

    window_loss += loss;
    window_baseline += step_baseline;
    window_time += seconds;
    run_time += seconds;
    ++window_steps;

    if (log_step) {
      // Each dp replica saw its own part of the global batches: average over dp.
      Tensor sums = Tensor::from_vector(std::vector<double>{window_loss, window_baseline}, {2});
      mesh.dp().all_reduce(sums, ReduceOp::avg);
      const auto v = sums.to_vector<double>();
      last_loss = v[0] / static_cast<double>(window_steps);
      last_baseline = v[1] / static_cast<double>(window_steps);
      if (std::isnan(first_loss)) {
        first_loss = last_loss;
        first_baseline = last_baseline;
      }
      const double step_time = window_time / static_cast<double>(window_steps);
      // The ETA from the wall time of the steps so far (evaluations and saves included).
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      const double eta = wall / static_cast<double>(step - start_step) * static_cast<double>(cfg.schedule.steps - step);
      const double samples_per_s = static_cast<double>(samples_per_step) / step_time;
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.6e  %s %.6e  lr %.3e  grad_norm %.3e  step %.1f ms  %.1f samples/s  "
                    "%.3e %s/s  eta %s",
                    static_cast<long long>(step), static_cast<long long>(cfg.schedule.steps), last_loss,
                    baseline.c_str(), last_baseline, lr, grad_norm, 1e3 * step_time, samples_per_s,
                    units_per_step / step_time, unit.c_str(), format_duration(eta).c_str());
      log.info(line);
      metrics.write(JsonRecord("train")
                        .add("step", step)
                        .add("loss", last_loss)
                        .add("baseline", last_baseline)
                        .add("lr", lr)
                        .add("grad_norm", grad_norm)
                        .add("step_time_s", step_time)
                        .add("samples_per_s", samples_per_s)
                        .add(unit_key, units_per_step / step_time)
                        .add("eta_s", eta)
                        .add("epoch", position / steps_per_epoch));
      window_loss = window_baseline = window_time = 0;
      window_steps = 0;
    }

    const bool final_step = step == cfg.schedule.steps;
    if (validation.samples > 0 &&
        (final_step || (cfg.schedule.eval_every > 0 && step % cfg.schedule.eval_every == 0))) {
      const auto e0 = std::chrono::steady_clock::now();
      const TrainingTask::Evaluation e = evaluate(validation, mesh, task, local_batch);
      if (data_parallel) data_parallel->finish_evaluation();
      const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
      last_val_loss = e.loss;
      std::snprintf(line, sizeof line, "validation step %lld/%lld  val_loss %.6e  %s %.6e  (%lld samples, %.1f ms)",
                    static_cast<long long>(step), static_cast<long long>(cfg.schedule.steps), e.loss,
                    baseline.c_str(), e.baseline, static_cast<long long>(validation.evaluated), 1e3 * eval_seconds);
      log.info(line);
      metrics.write(JsonRecord("validation")
                        .add("step", step)
                        .add("val_loss", e.loss)
                        .add("baseline", e.baseline)
                        .add("samples", validation.evaluated)
                        .add("time_s", eval_seconds));
    }

    if (!cfg.checkpoint.dir.empty() &&
        (final_step || (cfg.checkpoint.interval > 0 && step % cfg.checkpoint.interval == 0))) {
      last_checkpoint = save(step);
      last_saved_step = step;
    }
    if (opts.kill_after_step == step) {
      log.info("--kill-after-step " + std::to_string(step) + ": killing every rank");
      std::raise(SIGKILL);
    }

    // The step boundary: did any rank get a stop signal? One MAX all-reduce of one value,
    // so every rank stops after this same step (a rank signalled a moment later than the
    // others stops with them, not one step later).
    if (!final_step) {
      Tensor flag = Tensor::from_vector(std::vector<double>{static_cast<double>(stop_signal_received())}, {1});
      mesh.world().all_reduce(flag, ReduceOp::max);
      stopped_by = static_cast<int>(flag.to_vector<double>()[0]);
      if (stopped_by != 0) {
        log.info(std::string("signal: ") + signal_name(stopped_by) + " received; stopping after step " +
                 std::to_string(step) + " of " + std::to_string(cfg.schedule.steps));
        if (!cfg.checkpoint.dir.empty() && last_saved_step != step) {
          last_checkpoint = save(step);
          last_saved_step = step;
        }
        stopped_at_step = step;
        break;
      }
    }
  }

  if (stopped_by != 0) {
    if (cfg.checkpoint.dir.empty()) {
      log.warn(std::string("stopped by ") + signal_name(stopped_by) +
               " with no checkpoint.dir: nothing saved; exiting with status " + std::to_string(128 + stopped_by));
      return 128 + stopped_by;
    }
    log.info("signal: stopped at step " + std::to_string(stopped_at_step) + " with checkpoint " + last_checkpoint +
             "; exiting with status " + std::to_string(kExitRequeue) +
             " (requeue me: resume: latest_or_start continues from it)");
    return kExitRequeue;
  }

  const std::int64_t steps_run = cfg.schedule.steps - start_step;
  const double step_time = run_time / static_cast<double>(steps_run);
  std::snprintf(line, sizeof line, "summary: %lld steps (%lld..%lld) in %.2f s: %.1f ms/step, %.1f samples/s, %.3e %s/s",
                static_cast<long long>(steps_run), static_cast<long long>(start_step + 1),
                static_cast<long long>(cfg.schedule.steps), run_time, 1e3 * step_time,
                static_cast<double>(samples_per_step) / step_time, units_per_step / step_time, unit.c_str());
  log.info(line);
  log.info("summary: first logged loss " + fmt("%.6e", first_loss) + " (" + task.first_loss_context(first_baseline) +
           ")");
  std::snprintf(line, sizeof line,
                "summary: final loss %.6e %s %.6e ratio %.4f (%s the %s baseline; mean of the last logged window)",
                last_loss, baseline.c_str(), last_baseline, last_loss / last_baseline,
                last_loss < last_baseline ? "below" : "NOT below", baseline.c_str());
  log.info(line);
  if (validation.samples > 0) log.info("summary: final validation loss " + fmt("%.6e", last_val_loss));
  if (!last_checkpoint.empty()) log.info("summary: last checkpoint " + last_checkpoint);
  metrics.write(JsonRecord("summary")
                    .add("steps_run", steps_run)
                    .add("time_s", run_time)
                    .add("final_loss", last_loss)
                    .add("final_baseline", last_baseline)
                    .add("final_val_loss", last_val_loss));
  agree_on_success(mesh.world().mpi_comm(), [&] { metrics.check_complete(); });
  return 0;
}

}  // namespace tessera::run
