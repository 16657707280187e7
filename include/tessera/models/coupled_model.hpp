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
// Online training through the same plan: train_step() takes normalised inputs and
// targets in the code's layout on every rank, moves both to the model ranks in one
// transfer, and runs there the step tessera-run runs: forward, the latitude-weighted MSE
// (domain::lat_weighted_mse over the model's bands, the config's latitude grid),
// backward, the gradient sync of the model's mesh (tensor-replicated and domain-
// replicated parameters) and an optimizer step (AdamW or SGD, created on the first step
// and kept: its state carries over). The loss comes back to every code rank. The
// weights follow the same run on the gathered fields at M model ranks (at M = 1, the
// serial run bit for bit).
//
// Collective over the code's communicator; every failure (a checkpoint that cannot be
// read, a model grid that is not the code's, a bad rank choice, a field of the wrong
// shape on one rank) throws the same error on every rank.

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/device.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/optim.hpp"

namespace tessera::models {

// One training step's optimizer (torch's defaults otherwise: AdamW betas 0.9, 0.999,
// eps 1e-8, weight decay 0.01; SGD without momentum or weight decay).
struct CoupledTrainOptions {
  enum class Optimizer { adamw, sgd };
  Optimizer optimizer = Optimizer::adamw;
  double lr = 1e-3;
};

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

  // One training step on normalised fields: input and target f32 (B, channels, code box
  // lat, code box lon) (or (channels, lat, lon)) on every code rank, the same B
  // everywhere. Returns the step's loss (before the update) on every code rank. The
  // optimizer kind must stay that of the first step (InvalidArgument otherwise); the
  // learning rate may change from step to step. Collective.
  double train_step(const Tensor& code_input, const Tensor& code_target, const CoupledTrainOptions& options = {});
  // Steps taken by train_step.
  std::int64_t steps() const { return steps_; }

  const FieldEmulatorConfig& config() const { return config_; }
  const domain::Redistribution& plan() const { return *plan_; }
  bool runs_model() const { return model_ != nullptr; }
  // On model ranks only (InvalidArgument elsewhere).
  FieldEmulator& model() const;
  const Mesh& mesh() const;

 private:
  void run(const Tensor& code_input, Tensor& output, bool physical);
  // Argument checks of run and train_step, agreed over the code communicator; returns B.
  std::int64_t check_field(const Tensor& field, const std::string& what, const std::string& role) const;

  const domain::Decomposition* code_;
  FieldEmulatorConfig config_;
  std::unique_ptr<domain::Redistribution> plan_;
  std::unique_ptr<Mesh> mesh_;            // model ranks; the model refers to it
  std::unique_ptr<FieldEmulator> model_;  // model ranks
  std::unique_ptr<tessera::Optimizer> optimizer_;  // model ranks, from the first train_step
  CoupledTrainOptions::Optimizer optimizer_kind_ = CoupledTrainOptions::Optimizer::adamw;
  std::int64_t steps_ = 0;
};

}  // namespace tessera::models
