#pragma once
// tessera-run's imported graph on the field data (model.type: onnx; docs/driver.md,
// "Your own model: ONNX"): an ONNX file whose one input is the normalised fields
// (batch, channels, lat, lon) at time t and whose one output is the state `data.lead`
// steps ahead, same shape. Shared by training (train_onnx_model.cpp) and predict
// (predict_onnx_model.cpp).
//
// The graph runs whole on every rank (data parallel), or, with parallelism.domain > 1,
// split over the mesh's latitude bands (OnnxModel::split_over), the field emulator's
// decomposition, so the same FieldData band feeds either model.

#include <cstdint>
#include <memory>
#include <string>

#include "field_data.hpp"
#include "run_config.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/mesh.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace tessera::run {

class OnnxFieldModel {
 public:
  // Loads cfg.onnx.path for batches of `batch` samples and checks it against the data's
  // channels and grid (`info`): ConfigError naming model.path, the graph's input and the
  // data's extents otherwise. A symbolic batch dim takes `batch`; a fixed one must equal
  // it when `training` (ConfigError naming data.batch_size), and forward-only batches of
  // another size are padded to it. Collective over the mesh's world (every rank reads
  // the file; one rank's failure is every rank's).
  OnnxFieldModel(const RunConfig& cfg, const FieldDataInfo& info, const Mesh& mesh, std::int64_t batch,
                 bool training);

  onnx::OnnxModel& graph() { return *graph_; }
  const domain::Decomposition& decomposition() const { return *decomposition_; }
  bool split() const { return split_; }
  // "OnnxModel(model.onnx: x [4, 3, 32, 64] -> y, 12 parameters in 4 tensors)".
  std::string describe() const;

  // Forward of `x` f32 [n, channels, band, nlon] (this rank's band) for any n: chunks of
  // the graph's batch, the last padded with zeros (the samples are independent in
  // inference). Collective over the domain group.
  Tensor forward(const Tensor& x);
  // Forward of a full graph batch, the latitude-weighted MSE to `target` and backward
  // (parameters' gradients: this dp replica's, already summed over the domain group).
  // Returns the loss.
  double forward_backward(const Tensor& x, const Tensor& target, const domain::LatitudeSpec& spec);

 private:
  Tensor run_checked(const Tensor& x);

  std::string path_;
  const Mesh& mesh_;
  std::unique_ptr<domain::Decomposition> decomposition_;
  std::unique_ptr<onnx::OnnxModel> graph_;
  std::int64_t batch_ = 0;
  bool split_ = false;
  bool checked_ = false;  // the first forward's output was checked
};

// The `model:` mapping of an ONNX run's checkpoint metadata: the graph's input and
// output names, its parameters, and the data it was trained on (channels, grid,
// variables, normalisation, time step), which predict needs and resume compares.
std::string onnx_model_yaml(OnnxFieldModel& model, const FieldDataInfo& info, const RunConfig& cfg);
// The first indented block under "model:" of checkpoint metadata ("" when none).
std::string model_section(const std::string& metadata);

}  // namespace tessera::run
