#include "predict_onnx_model.hpp"

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "onnx_field_model.hpp"
#include "predict_rollout.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::run {
namespace {

// What a checkpoint of an ONNX run says about the data it was trained on
// (onnx_model_yaml): the fields as the graph saw them.
FieldDataInfo trained_data(const io::CheckpointMetadata& header) {
  const std::string where = "predict.checkpoint: '" + header.file + "'";
  YAML::Node model;
  try {
    model = YAML::Load(header.metadata)["model"];
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + " holds metadata that is not YAML: " + e.what());
  }
  const std::string type = model && model["type"] ? model["type"].as<std::string>() : "field_emulator";
  if (type != "onnx") {
    throw ConfigError(where + " holds a " + type + " model, not an onnx graph (model.type is onnx)");
  }
  FieldDataInfo info;
  try {
    info.channels = model["channels"].as<std::int64_t>();
    info.nlat = model["nlat"].as<std::int64_t>();
    info.nlon = model["nlon"].as<std::int64_t>();
    info.latitude_grid = models::parse_latitude_grid(model["latitude_grid"].as<std::string>(), "latitude_grid");
    info.variables = model["variables"].as<std::vector<std::string>>();
    if (model["mean"]) {
      info.mean = model["mean"].as<std::vector<double>>();
      info.std = model["std"].as<std::vector<double>>();
    }
    info.dt_seconds = model["dt_seconds"].as<double>();
    if (model["latitudes"]) info.coords.lat = model["latitudes"].as<std::vector<double>>();
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": its model description is incomplete: " + e.what());
  }
  return info;
}

// Physical units in and out: the graph was trained on normalised fields.
class OnnxStep {
 public:
  OnnxStep(OnnxFieldModel& model, const FieldDataInfo& info) : model_(model), info_(info) {}
  Tensor operator()(const Tensor& physical) {
    Tensor x = physical.clone();
    scale(x, /*forward=*/true);
    Tensor y = model_.forward(x).clone();
    scale(y, /*forward=*/false);
    return y;
  }

 private:
  // In place on f32 [1, channels, band, nlon]: (v - mean) / std, or back.
  void scale(Tensor& field, bool forward) const {
    if (info_.mean.empty()) return;
    const std::int64_t per_channel = field.numel() / info_.channels;
    float* v = field.data<float>();
    for (std::int64_t c = 0; c < info_.channels; ++c) {
      const auto k = static_cast<std::size_t>(c);
      const double mean = info_.mean[k], std = info_.std[k];
      for (std::int64_t i = c * per_channel; i < (c + 1) * per_channel; ++i) {
        v[i] = static_cast<float>(forward ? (v[i] - mean) / std : v[i] * std + mean);
      }
    }
  }

  OnnxFieldModel& model_;
  const FieldDataInfo& info_;
};

}  // namespace

int predict_onnx_model(const RunConfig& cfg, const Options& opts) {
  check_predict_output(cfg, opts);
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, Device::host());  // the graph runs on the host backend
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const io::CheckpointMetadata header = io::read_checkpoint_metadata(predict_checkpoint(cfg), mesh.world());
  const FieldDataInfo info = trained_data(header);
  OnnxFieldModel model(cfg, info, mesh, /*batch=*/1, /*training=*/false);
  const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, model.graph());

  RolloutModel rollout;
  rollout.description = model.describe();
  rollout.title = "tessera onnx rollout";
  rollout.variables = info.variables;
  rollout.channels = info.channels;
  rollout.nlat = info.nlat;
  rollout.nlon = info.nlon;
  rollout.latitude_spec = info.latitude_spec();
  rollout.dt_seconds = info.dt_seconds;
  rollout.checkpoint_file = loaded.file;
  rollout.checkpoint_step = loaded.step;
  rollout.decomposition = &model.decomposition();
  OnnxStep step(model, info);
  rollout.step = [&](const Tensor& state) { return step(state); };
  return write_rollout(cfg, opts, mesh, log, rollout);
}

}  // namespace tessera::run
