#include "train_field_emulator.hpp"

#include <memory>
#include <string>
#include <vector>

#include "field_data.hpp"
#include "field_run_data.hpp"
#include "training_loop.hpp"
#include "tessera/agree.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/placement.hpp"
#include "tessera/train/training_step.hpp"

namespace tessera::run {
namespace {

// The model as trained: the config's architecture on the data's grid and channels.
models::FieldEmulatorConfig model_config(const RunConfig& cfg, const FieldDataInfo& info) {
  return train::field_emulator_config(cfg, {.channels = info.channels,
                                            .nlat = info.nlat,
                                            .nlon = info.nlon,
                                            .latitude_grid = info.latitude_grid,
                                            .latitudes = info.latitude_spec().degrees,
                                            .variables = info.variables,
                                            .mean = info.mean,
                                            .std = info.std,
                                            .dt_seconds = info.dt_seconds * static_cast<double>(cfg.data.lead)});
}

// Bytes of the activations one local sample keeps between forward and backward (the
// layers' caches, the halo-padded inputs and the im2col workspace of the convolutions):
// an estimate for the memory plan, not a measurement.
// A checkpointed block keeps only its input; during backward one block is recomputed
// (holding its input among its activations). In long double: a config's sizes may
// multiply past int64 (the memory check refuses them; the plan prints them saturated).
long double activation_bytes_per_sample(const models::FieldEmulatorConfig& m, std::int64_t lat_local, int tp,
                                        const nn::CheckpointPolicy& checkpointing = {}) {
  using F = long double;
  const F k = static_cast<F>(m.kernel), halo = k - 1, width = static_cast<F>(m.width), channels = static_cast<F>(m.channels);
  const F plane = static_cast<F>(lat_local) * static_cast<F>(m.nlon);
  const F padded = (static_cast<F>(lat_local) + halo) * (static_cast<F>(m.nlon) + halo);
  const F hidden_local = static_cast<F>(shard_range(m.mlp_hidden, tp, 0).length);  // the widest rank's
  const F block = (3 * width + 2 * hidden_local) * plane;
  const F checkpointed = static_cast<F>(checkpointing.count(m.n_blocks)), n_blocks = static_cast<F>(m.n_blocks);
  F floats = channels * padded + channels * k * k * plane + width * plane;  // encoder
  floats += (n_blocks - checkpointed) * block;                                   // blocks
  if (checkpointed > 0) floats += (checkpointed - 1) * width * plane + block;   // inputs; one recomputed
  floats += 2 * width * plane;                                                   // GELU
  floats += width * padded + width * k * k * plane + channels * plane;           // decoder
  return floats * static_cast<F>(sizeof(float));
}

class FieldEmulatorTask final : public TrainingTask {
 public:
  // `validation_data`: the validation file's fields (null: none, or a held-out part of `data`).
  FieldEmulatorTask(const RunConfig& cfg, const Mesh& mesh, const FieldDataInfo& info,
                    const models::FieldEmulatorConfig& arch, std::unique_ptr<models::FieldEmulator> model,
                    std::unique_ptr<FieldData> data, std::unique_ptr<FieldData> validation_data,
                    const ValidationSplit& split)
      : cfg_(cfg), mesh_(mesh), info_(info), arch_(arch), model_(std::move(model)), data_(std::move(data)),
        validation_data_(std::move(validation_data)), split_(split) {}

  nn::Module& model() override { return *model_; }
  std::int64_t samples() const override { return split_.train; }
  std::int64_t validation_samples() const override { return split_.validation; }

  void check_saved_model(const io::CheckpointMetadata& header) const override {
    train::check_saved_field_emulator(header, arch_, "resume");
  }
  std::string checkpoint_metadata(const std::string& run_section) const override {
    return models::model_metadata(arch_, run_section);
  }
  std::string extra_run_keys() const override {
    return "  data: \"" + cfg_.data.path + "\"\n  lead: " + std::to_string(cfg_.data.lead) + "\n";
  }

  void load_batch(const std::vector<std::int64_t>& samples) override {
    data_->batch(samples, x_read_, y_read_);
    x_ = x_read_.to(mesh_.device());  // no copy on the host
    y_ = y_read_.to(mesh_.device());
  }
  double forward_backward() override { return train::field_emulator_forward_backward(*model_, x_, y_); }
  std::string batch_problem(std::int64_t step) const override {
    return non_finite_batch(x_read_, y_read_, info_, cfg_.data.path, model_->decomposition().box().lat.start, step);
  }
  // Persistence: predicting "no change" on the same batch.
  double baseline() override {
    return domain::lat_weighted_mse(x_, y_, model_->decomposition(), info_.latitude_spec()).value;
  }
  Evaluation evaluate(const std::vector<std::int64_t>& samples) override {
    std::vector<std::int64_t> times(samples);
    for (auto& t : times) t += split_.validation_first;
    (validation_data_ ? *validation_data_ : *data_).batch(times, vx_read_, vy_read_);
    const Tensor x = vx_read_.to(mesh_.device()), y = vy_read_.to(mesh_.device());
    const Tensor prediction = model_->forward(x);
    const auto& d = model_->decomposition();
    return {domain::lat_weighted_mse(prediction, y, d, info_.latitude_spec()).value,
            domain::lat_weighted_mse(x, y, d, info_.latitude_spec()).value};
  }

  std::string baseline_name() const override { return "persistence"; }
  std::string throughput_unit() const override { return "grid points"; }
  double units_per_sample() const override { return static_cast<double>(info_.nlat * info_.nlon); }
  std::string first_loss_context(double first_baseline) const override {
    return "persistence " + fmt("%.6e", first_baseline);
  }

 private:
  const RunConfig& cfg_;
  const Mesh& mesh_;
  const FieldDataInfo& info_;
  const models::FieldEmulatorConfig& arch_;
  std::unique_ptr<models::FieldEmulator> model_;
  std::unique_ptr<FieldData> data_, validation_data_;
  ValidationSplit split_;
  Tensor x_read_, y_read_, x_, y_;  // as read (host, reused between steps) and as trained (mesh's device)
  Tensor vx_read_, vy_read_;        // validation batches as read
};

}  // namespace

int train_field_emulator(const RunConfig& cfg, const Options& opts) {
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, run_device(cfg));
  const MPI_Comm world = mesh.world().mpi_comm();
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const FieldRunData run_data = read_field_run_data(cfg, mesh);
  const FieldDataInfo& info = run_data.info;
  const models::FieldEmulatorConfig arch = model_config(cfg, info);
  const std::int64_t local_batch = run_data.local_batch;
  const ValidationSplit& split = run_data.split;

  // Before anything is allocated: a config whose model cannot fit fails here, on every rank.
  check_model_fits(mesh, cfg.source + ": the model", arch.parameter_count(), optimizer_kind(cfg.optimizer));
  // Tensor parallelism and activation checkpointing applied; data parallelism comes later.
  train::BuiltFieldEmulator built = train::build_field_emulator(cfg, arch, mesh);
  std::unique_ptr<models::FieldEmulator> model = std::move(built.model);
  const nn::CheckpointPolicy& checkpointing = cfg.activation_checkpointing;
  const std::size_t checkpointed = built.checkpointed_blocks;
  const domain::Decomposition& decomposition = model->decomposition();
  const auto box = decomposition.box();
  std::int64_t global_parameters = 0;
  for (const auto& [name, p] : model->named_parameters()) global_parameters += shape_numel(p->global_shape);

  log.info("model: " + model->describe() + ", " + std::to_string(global_parameters) + " parameters");
  if (const std::string p = precision_summary(cfg, mesh); !p.empty()) log.info(p);
  if (checkpointing.enabled()) {
    log.info("activation checkpointing: " + checkpointing.str() + " (" + std::to_string(checkpointed) + " of " +
             std::to_string(arch.n_blocks) + " blocks recompute their forward in backward)");
  }
  log_field_run_data(log, cfg, run_data);
  log.debug("rank 0 holds " + box.str());

  const std::int64_t data_bytes =
      info.times * info.channels * box.lat.length * info.nlon * static_cast<std::int64_t>(sizeof(float));
  // The data band first, by its own check (it names the file), then the whole plan,
  // activations included, against memory: the same refusals with --dry-run as without,
  // before any band or batch is allocated.
  agree_on_success(world, [&] { (void)FieldData::band_elements(info, box.lat.length); });
  const dp::MemoryReport plan = dp::plan_memory(*model, dp::MemoryPlanLayout::of(mesh), optimizer_kind(cfg.optimizer));
  const long double activations = static_cast<long double>(local_batch) *
                                  activation_bytes_per_sample(arch, box.lat.length, mesh.tp_size(), checkpointing);
  check_memory_plan_fits(mesh, cfg.source + ": the model",
                         static_cast<long double>(plan.total_bytes()) + static_cast<long double>(plan.transient_bytes),
                         activations, static_cast<long double>(data_bytes),
                         "lower data.batch_size, model.width, model.mlp_hidden or model.n_blocks, use "
                         "activation_checkpointing, or split the grid over more ranks (parallelism.domain)");
  if (opts.dry_run) {
    print_memory_plan(log, mesh, "lat band", box.lat.start, box.lat.start + box.lat.length, plan,
                      saturated_bytes(activations), data_bytes, checkpointing,
                      saturated_bytes(static_cast<long double>(local_batch) *
                                      activation_bytes_per_sample(arch, box.lat.length, mesh.tp_size())));
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  FieldBands bands = read_field_bands(cfg, run_data, mesh, box.lat.start, box.lat.length);

  // Same master weights at every layout, before dp shards them.
  std::unique_ptr<dp::DataParallel> data_parallel = train::start_training(cfg, *model, mesh);
  FieldEmulatorTask task(cfg, mesh, info, arch, std::move(model), std::move(bands.data),
                         std::move(bands.validation), split);
  return run_training(cfg, opts, log, mesh, task, data_parallel.get());
}

}  // namespace tessera::run
