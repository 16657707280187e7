#pragma once
// CoupledModel: a field emulator run for a code on fewer ranks than the code has.
//
// The code keeps its decomposition (N ranks, each its box, any 2-D block layout of the
// lat-lon grid); the model runs on M of those ranks (a count, a rank list, or one per GPU
// on each node: domain::ModelRanks) as latitude bands x `tensor` tensor-parallel ranks.
// predict() and forward() take the code's fields in the code's layout on all N ranks and
// return the result in the same layout:
//
//   code box (N ranks) --Redistribution::to_model--> model bands (M ranks)
//     --FieldEmulator::predict--> --Redistribution::to_code--> code box (N ranks)
//
// The M model ranks build a Mesh (tensor x M / tensor) over the plan's model
// communicator and load the checkpoint there (load_model); the other ranks hold no model
// and, while it runs, wait in the library's wait policy (the agreement that follows the
// forward). The result equals the model's at M ranks in latitude bands, whatever the
// code's layout (for M = 1, the serial model on the gathered field, bit for bit).
//
//   tessera::domain::Decomposition code(comm, {nlat, nlon}, {2, 2});
//   tessera::models::CoupledModel model("runs/demo", code, tessera::domain::ModelRanks::count(2));
//   tessera::Tensor y = model.predict(x);  // x f32 [B, C, box lat, box lon] on every rank
//
// Collective over the code's communicator; every failure (a checkpoint that cannot be
// read, a model grid that is not the code's, a bad rank choice, a field of the wrong
// shape on one rank) throws the same error on every rank.

#include <memory>
#include <string>

#include "tessera/device.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::models {

struct CoupledModelOptions {
  int tensor = 1;  // tensor-parallel degree of the model (divides M)
  // Run the model on the model ranks' GPUs when every model rank sees one (the Mesh picks
  // node-local rank modulo visible devices); the host otherwise or when false.
  bool use_gpus = true;
};

class CoupledModel {
 public:
  // Collective over code.comm(); the decomposition must outlive the model.
  CoupledModel(const std::string& checkpoint_path, const domain::Decomposition& code,
               const domain::ModelRanks& ranks = domain::ModelRanks::per_node(), CoupledModelOptions options = {});
  ~CoupledModel();
  CoupledModel(const CoupledModel&) = delete;
  CoupledModel& operator=(const CoupledModel&) = delete;

  // x: f32 [B, channels, code box lat, code box lon] (or [channels, lat, lon]: B = 1) on
  // every code rank, the same B everywhere. Physical units (predict) or normalised
  // (forward). Returns a contiguous host tensor of x's shape. Collective.
  Tensor predict(const Tensor& code_input);
  Tensor forward(const Tensor& code_input);
  // The same into `output` (x's shape, any strides; may be x itself).
  void predict(const Tensor& code_input, Tensor& output);
  void forward(const Tensor& code_input, Tensor& output);

  const FieldEmulatorConfig& config() const { return config_; }
  const domain::Redistribution& plan() const { return *plan_; }
  bool runs_model() const { return model_ != nullptr; }
  // On model ranks only (InvalidArgument elsewhere).
  FieldEmulator& model() const;
  const Mesh& mesh() const;

 private:
  void run(const Tensor& code_input, Tensor& output, bool physical);

  const domain::Decomposition* code_;
  FieldEmulatorConfig config_;
  std::unique_ptr<domain::Redistribution> plan_;
  std::unique_ptr<Mesh> mesh_;            // model ranks; the model refers to it
  std::unique_ptr<FieldEmulator> model_;  // model ranks
};

}  // namespace tessera::models
