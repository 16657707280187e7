#include "training_loop.hpp"

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
#include <thread>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tessera/agree.hpp"
#include "tessera/clip.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::run {
namespace {

// Set by the handler of SIGTERM / SIGUSR1 (the signal number); read at step boundaries.
// Lock-free, hence async-signal-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::int64_t g_kill_during_save = -1;

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  // The first signal wins; a second one (while saving, say) changes nothing.
  g_stop_signal.compare_exchange_strong(expected, sig);
}

extern "C" void kill_self_now(int) { ::kill(::getpid(), SIGKILL); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

// --kill-during-save: from now on, the first write that extends a file (the save's own
// HDF5 files: nothing else writes regular files during a save) raises SIGXFSZ, whose
// handler kills the process. A rank that writes nothing itself (a rank holding only
// replicas) is killed by a watcher once the save's temporary directory exists. Either way
// the directory is left unfinished, as after a real kill.
void arm_kill_during_save(const std::string& root, std::int64_t step) {
  struct sigaction sa {};
  sa.sa_handler = kill_self_now;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGXFSZ, &sa, nullptr);
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, ".step_%08lld.tmp-", static_cast<long long>(step));
  std::thread([root, p = std::string(prefix)] {
    for (;;) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
        if (e.path().filename().string().rfind(p, 0) == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the writers get going
          ::kill(::getpid(), SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }).detach();
  struct rlimit limit {};
  ::getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = 0;
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

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

// The end of every step: the global gradient norm (clipped when
// optimizer.clip_grad_norm > 0, otherwise measured on log steps), the divergence check
// (the norm comes from one all-reduce, so every rank stops together), the learning-rate
// schedule and the optimizer step. Returns the norm (NaN when neither clipped nor logged).
double clip_and_step(const RunConfig& cfg, const NamedParameters& params, Optimizer& optimizer, const Mesh& mesh,
                     std::int64_t step, bool log_step) {
  double grad_norm = NAN;
  if (cfg.optimizer.clip_grad_norm > 0) {
    grad_norm = clip_grad_norm(params, cfg.optimizer.clip_grad_norm, mesh);
  } else if (log_step) {
    grad_norm = global_grad_norm(params, mesh);
  }
  if ((cfg.optimizer.clip_grad_norm > 0 || log_step) && !std::isfinite(grad_norm)) {
    throw InvalidArgument("training diverged at step " + std::to_string(step) + ": gradient norm " +
                          fmt("%g", grad_norm) + " (lower optimizer.lr or set optimizer.clip_grad_norm)");
  }
  optimizer.set_learning_rate(learning_rate_at(cfg.optimizer, step, cfg.schedule.steps));
  optimizer.step();
  return grad_norm;
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

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's and HDF5's system calls must not see EINTR
  for (int sig : {SIGTERM, SIGUSR1}) ::sigaction(sig, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal.load(); }

void set_kill_during_save(std::int64_t step) { g_kill_during_save = step; }

int run_training(const RunConfig& cfg, const Options& opts, const Log& log, const Mesh& mesh, TrainingTask& task,
                 dp::DataParallel* data_parallel) {
  nn::Module& model = task.model();
  const NamedParameters params = model.named_parameters();
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg.optimizer, params);
  const std::int64_t local_batch = cfg.data.batch_size / mesh.dp_size();
  check_checkpoint_dir_writable(cfg, mesh);

  // ---- resume
  std::int64_t start_step = 0;
  std::optional<std::string> path;
  agree_on_success(mesh.world().mpi_comm(), [&] { path = resume_path(cfg, log); });
  if (path) {
    const io::CheckpointMetadata header = io::read_checkpoint_metadata(*path, mesh.world());
    task.check_saved_model(header);
    const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, model, optimizer.get());
    start_step = loaded.step;
    log.info("resumed from " + loaded.file + " at step " + std::to_string(loaded.step) + " (saved at " +
             loaded.saved_mesh.str() + " on " + std::to_string(loaded.saved_world_size) + " ranks; now " +
             mesh.config().str() + " on " + std::to_string(mesh.world_size()) + ")");
  }
  if (start_step >= cfg.schedule.steps) {
    log.info("nothing to do: the run is at step " + std::to_string(start_step) + " of " +
             std::to_string(cfg.schedule.steps));
    return 0;
  }

  dp::DistributedSampler sampler(task.samples(), mesh,
                                 {.shuffle = cfg.data.shuffle, .seed = cfg.schedule.seed, .drop_last = true});
  const std::int64_t batches_per_epoch = sampler.num_batches(local_batch, /*drop_last_batch=*/true);
  if (batches_per_epoch < 1) {
    throw ConfigError(cfg.source + ": data.batch_size " + std::to_string(cfg.data.batch_size) +
                      " leaves no full batch per epoch");
  }

  const auto save = [&](std::int64_t step) {
    io::SaveOptions so;
    so.layout = cfg.checkpoint.layout;
    so.step = step;
    so.keep_last = cfg.checkpoint.keep_last;
    so.metadata = task.checkpoint_metadata("run:\n  config: \"" + cfg.source + "\"\n  seed: " +
                                           std::to_string(cfg.schedule.seed) + "\n  batch_size: " +
                                           std::to_string(cfg.data.batch_size) + "\n" + task.extra_run_keys());
    if (step == g_kill_during_save) {
      log.info("--kill-during-save " + std::to_string(step) + ": killing every rank during this save");
      arm_kill_during_save(cfg.checkpoint.dir, step);
    }
    const std::string dir = io::save_checkpoint(cfg.checkpoint.dir, mesh, model, optimizer.get(), so);
    log.info("checkpoint: " + dir + " (" + std::string(io::checkpoint_layout_name(cfg.checkpoint.layout)) + ")");
    return dir;
  };

  log.info("training: steps " + std::to_string(start_step + 1) + ".." + std::to_string(cfg.schedule.steps) + ", " +
           cfg.optimizer.type + " lr " + fmt("%g", cfg.optimizer.lr) + ", seed " +
           std::to_string(cfg.schedule.seed));

  const std::string baseline = task.baseline_name(), unit = task.throughput_unit();
  const double units_per_step = task.units_per_sample() * static_cast<double>(cfg.data.batch_size);
  double window_loss = 0, window_baseline = 0, window_time = 0, run_time = 0;
  std::int64_t window_steps = 0;
  double last_loss = NAN, last_baseline = NAN, first_loss = NAN, first_baseline = NAN;
  std::string last_checkpoint;
  std::int64_t last_saved_step = -1;
  int stopped_by = 0;  // the agreed stop signal (0: none)
  std::int64_t stopped_at_step = 0;
  char line[512];

  for (std::int64_t step = start_step + 1; step <= cfg.schedule.steps; ++step) {
    const std::int64_t position = step - 1;
    sampler.set_epoch(position / batches_per_epoch);
    task.load_batch(sampler.batch(position % batches_per_epoch, local_batch));

    mesh.world().barrier();  // so the step time is the slowest rank's, not rank 0's share
    const auto t0 = std::chrono::steady_clock::now();
    optimizer->zero_grad();
    const double loss = task.forward_backward();
    // The three reductions of the mesh; each is a no-op where its group has one rank.
    if (data_parallel) data_parallel->finish_gradient_sync();
    if (mesh.tp_size() > 1) tp::sync_replicated_gradients(model, mesh.tp());
    if (mesh.domain_size() > 1) domain::sync_domain_gradients(model, mesh);
    const bool log_step = step % cfg.schedule.log_every == 0 || step == cfg.schedule.steps;
    const double lr = learning_rate_at(cfg.optimizer, step, cfg.schedule.steps);
    const double grad_norm = clip_and_step(cfg, params, *optimizer, mesh, step, log_step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    window_loss += loss;
    window_baseline += task.baseline();
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
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.6e  %s %.6e  lr %.3e  grad_norm %.3e  step %.1f ms  %.1f samples/s  "
                    "%.3e %s/s",
                    static_cast<long long>(step), static_cast<long long>(cfg.schedule.steps), last_loss,
                    baseline.c_str(), last_baseline, lr, grad_norm, 1e3 * step_time,
                    static_cast<double>(cfg.data.batch_size) / step_time, units_per_step / step_time, unit.c_str());
      log.info(line);
      window_loss = window_baseline = window_time = 0;
      window_steps = 0;
    }

    const bool final_step = step == cfg.schedule.steps;
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
      Tensor flag = Tensor::from_vector(std::vector<double>{static_cast<double>(g_stop_signal.load())}, {1});
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
                static_cast<double>(cfg.data.batch_size) / step_time, units_per_step / step_time, unit.c_str());
  log.info(line);
  log.info("summary: first logged loss " + fmt("%.6e", first_loss) + " (" + task.first_loss_context(first_baseline) +
           ")");
  std::snprintf(line, sizeof line,
                "summary: final loss %.6e %s %.6e ratio %.4f (%s the %s baseline; mean of the last logged window)",
                last_loss, baseline.c_str(), last_baseline, last_loss / last_baseline,
                last_loss < last_baseline ? "below" : "NOT below", baseline.c_str());
  log.info(line);
  if (!last_checkpoint.empty()) log.info("summary: last checkpoint " + last_checkpoint);
  return 0;
}

}  // namespace tessera::run
