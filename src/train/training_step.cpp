#include "tessera/train/training_step.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "tessera/backend.hpp"
#include "tessera/clip.hpp"
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

void TrainingStep::begin() { optimizer_->zero_grad(); }

void TrainingStep::before_backward(std::int64_t micro) {
  // no_sync before the last backward of the step.
  if (data_parallel_) data_parallel_->set_gradient_sync(micro + 1 == config_.accumulate);
}

double TrainingStep::finish(std::int64_t step, bool measure_norm) {
  if (data_parallel_) data_parallel_->finish_gradient_sync();
  if (mesh_.tp_size() > 1) tp::sync_replicated_gradients(model_, mesh_.tp(), config_.reduce_dtype);
  if (mesh_.domain_size() > 1) domain::sync_domain_gradients(model_, mesh_, config_.reduce_dtype);
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
  if ((config_.clip_grad_norm > 0 || measure_norm) && !std::isfinite(grad_norm)) {
    char norm[32];
    std::snprintf(norm, sizeof norm, "%g", grad_norm);
    throw InvalidArgument("training diverged at step " + std::to_string(step) + ": gradient norm " + norm +
                          " (lower optimizer.lr or set optimizer.clip_grad_norm)");
  }
  optimizer_->set_learning_rate(learning_rate(step));
  optimizer_->step();
  return grad_norm;
}

}  // namespace tessera::train
