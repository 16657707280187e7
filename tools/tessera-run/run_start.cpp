// Where a training run starts: the checkpoint `resume` names (its weights, optimizer state
// and step), else the weights of `init_weights`, else step 0. Every check is agreed over
// the ranks, so a refusal is the same error on every rank.

#include "run_start.hpp"

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/agree.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/tp/lora.hpp"

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

// Resumes from the checkpoint `resume` names (its step, optimizer state and weights,
// after the task checked the saved architecture). Returns the step to continue after.
std::int64_t resume_from(const std::string& path, const Log& log, const Mesh& mesh, TrainingTask& task,
                         Optimizer* optimizer) {
  const io::CheckpointMetadata header = io::read_checkpoint_metadata(path, mesh.world());
  task.check_saved_model(header);
  const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, task.model(), optimizer);
  check_loaded_weights(task.model(), "resume", loaded.file, mesh);
  log.info("resumed from " + loaded.file + " at step " + std::to_string(loaded.step) + " (saved at " +
           loaded.saved_mesh.str() + " on " + std::to_string(loaded.saved_world_size) + " ranks; now " +
           mesh.config().str() + " on " + std::to_string(mesh.world_size()) + ")");
  return loaded.step;
}

// init_weights: the weights only. The architecture must match; the optimizer state and
// the step start fresh.
void init_weights_from(const std::string& path, const Log& log, const Mesh& mesh, TrainingTask& task) {
  const io::CheckpointMetadata header = io::read_checkpoint_metadata(path, mesh.world());
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
  const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, task.model(), nullptr, lo);
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
  check_loaded_weights(task.model(), "init_weights", loaded.file, mesh);
  log.info("init_weights: model weights from " + loaded.file + " (its step " + std::to_string(loaded.step) +
           ", saved at " + loaded.saved_mesh.str() + "); optimizer state fresh, starting at step 0");
}

// The step the run continues after: a resumed checkpoint's, else 0 (after init_weights
// when given).
}  // namespace

std::int64_t resume_or_init(const RunConfig& cfg, const Log& log, const Mesh& mesh, TrainingTask& task,
                            Optimizer* optimizer) {
  std::optional<std::string> path;
  agree_on_success(mesh.world().mpi_comm(), [&] { path = resume_path(cfg, log); });
  if (path) return resume_from(*path, log, mesh, task, optimizer);
  if (!cfg.init_weights.empty()) init_weights_from(cfg.init_weights, log, mesh, task);
  return 0;
}

}  // namespace tessera::run
