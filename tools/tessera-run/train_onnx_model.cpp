#include "train_onnx_model.hpp"

#include <memory>
#include <string>
#include <vector>

#include "field_run_data.hpp"
#include "onnx_field_model.hpp"
#include "training_loop.hpp"
#include "tessera/agree.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"

namespace tessera::run {
namespace {

class OnnxTask final : public TrainingTask {
 public:
  OnnxTask(const RunConfig& cfg, const FieldRunData& run_data, OnnxFieldModel& model, FieldBands bands)
      : cfg_(cfg), run_data_(run_data), model_(model), bands_(std::move(bands)),
        metadata_(onnx_model_yaml(model, run_data.info, cfg)) {}

  nn::Module& model() override { return model_.graph(); }
  // A split graph's backward sums its parameters' gradients over the bands itself.
  bool gradients_summed_over_domain() const override { return model_.split(); }
  std::int64_t samples() const override { return run_data_.split.train; }
  std::int64_t validation_samples() const override { return run_data_.split.validation; }

  // The same graph (its parameters' names and shapes) on the same data (channels, grid,
  // normalisation, time step); the file's path may differ.
  void check_saved_model(const io::CheckpointMetadata& header) const override {
    const std::string saved = model_section(header.metadata), ours = model_section(metadata_);
    if (saved != ours) {
      throw ConfigError("resume: the model in '" + header.file + "' differs from this config's: " +
                        first_difference(saved, ours));
    }
  }
  std::string checkpoint_metadata(const std::string& run_section) const override { return metadata_ + run_section; }
  std::string extra_run_keys() const override {
    return "  data: \"" + cfg_.data.path + "\"\n  lead: " + std::to_string(cfg_.data.lead) + "\n  onnx: \"" +
           cfg_.onnx.path + "\"\n";
  }

  void load_batch(const std::vector<std::int64_t>& samples) override { bands_.data->batch(samples, x_, y_); }
  std::string batch_problem(std::int64_t step) const override {
    return non_finite_batch(x_, y_, run_data_.info, cfg_.data.path, model_.decomposition().box().lat.start, step);
  }
  double forward_backward() override { return model_.forward_backward(x_, y_, spec()); }
  // Persistence: predicting "no change" on the same batch.
  double baseline() override { return domain::lat_weighted_mse(x_, y_, model_.decomposition(), spec()).value; }
  Evaluation evaluate(const std::vector<std::int64_t>& samples) override {
    std::vector<std::int64_t> times(samples);
    for (auto& t : times) t += run_data_.split.validation_first;
    (bands_.validation ? *bands_.validation : *bands_.data).batch(times, vx_, vy_);
    const Tensor prediction = model_.forward(vx_);
    const auto& d = model_.decomposition();
    return {domain::lat_weighted_mse(prediction, vy_, d, spec()).value,
            domain::lat_weighted_mse(vx_, vy_, d, spec()).value};
  }

  std::string baseline_name() const override { return "persistence"; }
  std::string throughput_unit() const override { return "grid points"; }
  double units_per_sample() const override {
    return static_cast<double>(run_data_.info.nlat * run_data_.info.nlon);
  }
  std::string first_loss_context(double first_baseline) const override {
    return "persistence " + fmt("%.6e", first_baseline);
  }

 private:
  domain::LatitudeSpec spec() const { return run_data_.info.latitude_spec(); }

  const RunConfig& cfg_;
  const FieldRunData& run_data_;
  OnnxFieldModel& model_;
  FieldBands bands_;
  std::string metadata_;  // the `model:` mapping of every checkpoint
  Tensor x_, y_, vx_, vy_;  // the batch and the validation batch (host: the graph runs there)
};

// --dry-run: one forward of zeros places a split graph's nodes and checks its output
// against the data's shape, so a graph that cannot train here is refused now.
void check_with_zeros(OnnxFieldModel& model, const FieldRunData& d) {
  const auto box = model.decomposition().box();
  (void)model.forward(Tensor::zeros({d.local_batch, d.info.channels, box.lat.length, d.info.nlon}, DType::f32));
}

// model.export: rank 0 writes the graph with the weights every rank holds (ddp keeps
// them identical; a split graph's are whole). Collective over the world.
void export_graph(const RunConfig& cfg, const Log& log, const Mesh& mesh, OnnxFieldModel& model) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    if (mesh.global_rank() == 0) onnx::save_onnx(model.graph(), cfg.onnx.path, cfg.onnx.export_path);
  });
  log.info("export: " + cfg.onnx.export_path + " (the graph of " + cfg.onnx.path + " with the trained weights)");
}

}  // namespace

int train_onnx_model(const RunConfig& cfg, const Options& opts) {
  // The imported graph runs on the host backend (docs/onnx.md, "Limits").
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, Device::host());
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const FieldRunData run_data = read_field_run_data(cfg, mesh);
  OnnxFieldModel model(cfg, run_data.info, mesh, run_data.local_batch, /*training=*/true);
  log.info("model: " + model.describe());
  log_field_run_data(log, cfg, run_data);
  const auto box = model.decomposition().box();
  log.debug("rank 0 holds " + box.str());
  if (opts.dry_run) {
    check_with_zeros(model, run_data);
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  FieldBands bands = read_field_bands(cfg, run_data, mesh, box.lat.start, box.lat.length);
  // The file's weights are the start (no initialisation); ddp makes dp rank 0's
  // everyone's. Overlapped ddp wraps child modules, and the graph has none.
  std::unique_ptr<dp::DataParallel> data_parallel;
  if (cfg.parallelism.data != DataParallelMode::none) {
    data_parallel = std::make_unique<dp::DataParallel>(
        model.graph(), mesh, dp::DataParallelOptions{.overlap = false, .reduce_dtype = cfg.optimizer.reduce_dtype});
  }
  OnnxTask task(cfg, run_data, model, std::move(bands));
  const int status = run_training(cfg, opts, log, mesh, task, data_parallel.get());
  if (status == 0 && !cfg.onnx.export_path.empty()) export_graph(cfg, log, mesh, model);
  return status;
}

}  // namespace tessera::run
