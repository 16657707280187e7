#include "tessera/train/training_step.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/clip.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/error.hpp"
#include "tessera/init.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::train {

dp::OptimizerKind optimizer_kind(const OptimizerConfig& o) {
  if (o.type == "adamw") return dp::OptimizerKind::adamw;
  return o.momentum > 0 ? dp::OptimizerKind::sgd_momentum : dp::OptimizerKind::sgd;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, NamedParameters params) {
  if (o.type == "adamw") {
    return std::make_unique<AdamW>(std::move(params), AdamWOptions{.lr = o.lr,
                                                                   .beta1 = o.beta1,
                                                                   .beta2 = o.beta2,
                                                                   .eps = o.eps,
                                                                   .weight_decay = o.weight_decay});
  }
  return std::make_unique<Sgd>(std::move(params),
                               SgdOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
}

Device training_device(const RunConfig& cfg, MPI_Comm comm) {
  // Every rank must decide alike: the fewest GPUs any rank sees decides for all. A rank
  // told device: host does not count its GPUs (and so never loads the CUDA plugin), but
  // still takes part, so ranks that disagree on the key cannot leave one waiting here.
  Communicator group(comm);
  const std::int64_t gpus = cfg.device == "host" ? 0 : cuda_device_count();
  Tensor visible = Tensor::from_vector<std::int64_t>({gpus}, {1});
  group.all_reduce(visible, ReduceOp::min);
  const bool every_rank_has_a_gpu = visible.to_vector<std::int64_t>()[0] > 0;
  if (cfg.device == "host" || (cfg.device == "auto" && !every_rank_has_a_gpu)) return Device::host();
  if (!every_rank_has_a_gpu) {
    throw ConfigError(cfg.source + ": device: cuda, but " +
                      (cuda_device_count() == 0 ? "this rank sees no GPU (" + cuda_unavailable_reason() + ")"
                                                : std::string("another rank sees no GPU")) +
                      "; use device: host or auto to train on the CPU cores");
  }
  return Device::cuda();
}

models::FieldEmulatorConfig field_emulator_config(const RunConfig& cfg, const FieldGrid& grid) {
  models::FieldEmulatorConfig m = cfg.model;
  m.channels = grid.channels;
  m.nlat = grid.nlat;
  m.nlon = grid.nlon;
  m.latitude_grid = grid.latitude_grid;
  m.latitudes = grid.latitudes;
  m.variables = grid.variables;
  m.mean = grid.mean;
  m.std = grid.std;
  m.dt_seconds = grid.dt_seconds;
  m.validate();
  return m;
}

BuiltFieldEmulator build_field_emulator(const RunConfig& cfg, const models::FieldEmulatorConfig& arch,
                                        const Mesh& mesh) {
  BuiltFieldEmulator built;
  built.model = std::make_unique<models::FieldEmulator>(arch, mesh);
  built.model->set_compute_precision(cfg.precision);
  built.checkpointed_blocks = models::checkpoint_activations(*built.model, cfg.activation_checkpointing).size();
  return built;
}

std::unique_ptr<dp::DataParallel> start_training(const RunConfig& cfg, nn::Module& model, const Mesh& mesh) {
  nn::initialize_parameters(model, cfg.schedule.seed);
  if (cfg.parallelism.data == DataParallelMode::none) return nullptr;
  dp::DataParallelOptions options;
  options.reduce_dtype = cfg.optimizer.reduce_dtype;
  return std::make_unique<dp::DataParallel>(model, mesh, options);
}

double field_emulator_forward_backward(models::FieldEmulator& model, const Tensor& input, const Tensor& target) {
  const Tensor prediction = model.forward(input);
  const domain::LossResult loss =
      domain::lat_weighted_mse(prediction, target, model.decomposition(), model.config().latitude_spec());
  model.backward(loss.grad);
  return loss.value;
}

void check_saved_field_emulator(const io::CheckpointMetadata& header, const models::FieldEmulatorConfig& arch,
                                const std::string& key) {
  const auto saved = models::model_config_from_metadata(header.metadata, header.file);
  if (!(saved == arch)) {
    throw ConfigError(key + ": the model in '" + header.file + "' differs from this config's: " +
                      first_difference(saved.to_yaml(), arch.to_yaml()));
  }
}

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(ia, la)), gb = static_cast<bool>(std::getline(ib, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (la != lb || !ga || !gb) return "checkpoint has '" + la + "', this run has '" + lb + "'";
  }
}

TrainingStep::TrainingStep(const OptimizerConfig& optimizer, std::int64_t total_steps, const Mesh& mesh,
                           nn::Module& model, dp::DataParallel* data_parallel)
    : config_(optimizer), total_steps_(total_steps), mesh_(mesh), model_(model), data_parallel_(data_parallel),
      params_(model.named_parameters()), optimizer_(make_optimizer(optimizer, params_)) {}

double TrainingStep::learning_rate(std::int64_t step) const { return learning_rate_at(config_, step, total_steps_); }

namespace {

// "parameter 'x' holds NaN" for the first parameter of `params` whose local block holds
// NaN or Inf; "" when every one is finite. Local.
std::string first_non_finite_parameter(const NamedParameters& params) {
  for (const auto& [name, p] : params) {
    if (p == nullptr || !p->value.defined() || p->value.numel() == 0) continue;
    const Tensor host = p->value.to(Device::host()).contiguous();
    const auto n = static_cast<std::size_t>(host.numel());
    std::optional<double> bad;
    switch (host.dtype()) {
      case DType::f32: {
        const std::span<const float> v(host.data<float>(), n);
        if (const auto i = tessera::detail::first_non_finite(v)) bad = v[*i];
        break;
      }
      case DType::f64: {
        const std::span<const double> v(host.data<double>(), n);
        if (const auto i = tessera::detail::first_non_finite(v)) bad = v[*i];
        break;
      }
      case DType::bf16: {
        for (std::size_t i = 0; i < n && !bad; ++i) {
          const float x = static_cast<float>(host.data<bfloat16>()[i]);
          if (!std::isfinite(x)) bad = x;
        }
        break;
      }
      case DType::i64: break;
    }
    if (bad) return "parameter '" + name + "' holds " + tessera::detail::non_finite_kind(*bad);
  }
  return "";
}

}  // namespace

void TrainingStep::begin() {
  if (!start_checked_) {
    start_checked_ = true;
    start_problem_ = first_non_finite_parameter(params_);
  }
  optimizer_->zero_grad();
}

void TrainingStep::note_non_finite_loss(std::int64_t step, const std::string& batch_problem) {
  if (first_bad_loss_step_ >= 0) return;
  first_bad_loss_step_ = step;
  bad_loss_batch_ = batch_problem;
}

void TrainingStep::report_divergence(std::int64_t step, double grad_norm) {
  Communicator& world = mesh_.world();
  // The notes are used up by this report: a caller that goes on (the C trainer with the
  // next batch) starts afresh.
  const std::int64_t noted_step = std::exchange(first_bad_loss_step_, -1);
  const std::string noted_batch = std::exchange(bad_loss_batch_, std::string());
  // The first step whose loss was not finite, over every rank (none: the gradients alone).
  Tensor first = Tensor::from_vector<std::int64_t>(
      {noted_step >= 0 ? noted_step : std::numeric_limits<std::int64_t>::max()}, {1});
  world.all_reduce(first, ReduceOp::min);
  const std::int64_t bad_step = first.to_vector<std::int64_t>()[0];
  const bool noted = bad_step != std::numeric_limits<std::int64_t>::max();
  // Each rank's cause, the strongest reported: its batch at that step (3), a parameter
  // that was not finite before the first step (2), a divergence (0).
  std::string message;
  std::int64_t cause = 0;
  if (noted && noted_step == bad_step && !noted_batch.empty()) {
    cause = 3;
    message = "training stopped at step " + std::to_string(step) + ": the loss of step " + std::to_string(bad_step) +
              " is not finite because " + noted_batch +
              " (fix or drop those values where the data enters; this is not a divergence)";
  } else if (!start_problem_.empty()) {
    cause = 2;
    message = "training stopped at step " + std::to_string(step) + ": " + start_problem_ +
              ", already before the first step of this run (check the checkpoint or initialisation it came from: "
              "`tessera-ckpt verify` names every such tensor; this is not a divergence)";
  }
  Tensor strongest = Tensor::from_vector<std::int64_t>({cause}, {1});
  world.all_reduce(strongest, ReduceOp::max);
  const std::int64_t reported = strongest.to_vector<std::int64_t>()[0];
  if (reported > 0) {
    agree_on_success(world.mpi_comm(), [&] {
      if (cause == reported) throw InvalidArgument(message);
    });
  }
  // A divergence: the same text on every rank (what each rank noted may differ).
  char norm[32];
  std::snprintf(norm, sizeof norm, "%g", grad_norm);
  std::string detail;
  if (noted) {
    detail = "; the loss was first not finite at step " + std::to_string(bad_step) +
             ", from parameters the updates of this run had made NaN or Inf";
  }
  throw InvalidArgument("training diverged at step " + std::to_string(step) + ": gradient norm " + norm + detail +
                        " (lower optimizer.lr or set optimizer.clip_grad_norm)");
}

void TrainingStep::before_backward(std::int64_t micro) {
  // no_sync before the last backward of the step.
  if (data_parallel_) data_parallel_->set_gradient_sync(micro + 1 == config_.accumulate);
}

double TrainingStep::finish(std::int64_t step, bool measure_norm) {
  if (data_parallel_) data_parallel_->finish_gradient_sync();
  if (mesh_.tp_size() > 1) tp::sync_replicated_gradients(model_, mesh_.tp(), config_.reduce_dtype);
  if (mesh_.domain_size() > 1 && !gradients_summed_over_domain_) domain::sync_domain_gradients(model_, mesh_, config_.reduce_dtype);
  // Each micro-batch's loss is its own mean: the step's mean is their average, and so is
  // its gradient (every parameter once: the optimizer refuses duplicates).
  if (config_.accumulate > 1) {
    for (const auto& [name, p] : params_) ops::scale(p->grad, 1.0 / static_cast<double>(config_.accumulate));
  }
  double grad_norm = NAN;
  if (config_.clip_grad_norm > 0) {
    grad_norm = clip_grad_norm(params_, config_.clip_grad_norm, mesh_);
  } else if (measure_norm) {
    grad_norm = global_grad_norm(params_, mesh_);
  }
  if ((config_.clip_grad_norm > 0 || measure_norm) && !std::isfinite(grad_norm)) report_divergence(step, grad_norm);
  optimizer_->set_learning_rate(learning_rate(step));
  optimizer_->step();
  return grad_norm;
}

}  // namespace tessera::train
