#pragma once
// The field emulator's training step, one implementation for tessera-run's training loop
// (tools/tessera-run/training_loop.cpp) and the C/Fortran trainer (tessera_trainer_step,
// docs/online-training.md): the optimizer of the config's `optimizer` section, the model
// built from the `model` section on a grid, and the step itself -- zeroed gradients, the
// micro-batches' forward/backward on the latitude-weighted MSE, then the dp, tp and
// domain gradient reductions once, the micro-batch average, clipping, the learning-rate
// schedule and the optimizer update.

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/device.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"
#include "tessera/train/run_config.hpp"

namespace tessera::train {

dp::OptimizerKind optimizer_kind(const OptimizerConfig& o);
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, NamedParameters params);

// The device training runs on, from the `device` key: host; cuda (every rank of `comm`
// must see a GPU, otherwise every rank throws the same ConfigError naming the key and the
// reason); auto (cuda when every rank sees a GPU, else host). Collective over `comm`.
Device training_device(const RunConfig& cfg, MPI_Comm comm);

// What the data says about the fields a field emulator trains on; the architecture keys
// come from the config's `model` section.
struct FieldGrid {
  std::int64_t channels = 0, nlat = 0, nlon = 0;
  domain::LatitudeGrid latitude_grid = domain::LatitudeGrid::cell_centres;
  std::vector<double> latitudes;       // explicit_rows: every row's latitude (degrees)
  std::vector<std::string> variables;  // may be empty
  std::vector<double> mean, std;       // the normalisation (empty: none)
  double dt_seconds = 0;               // between input and target (0: unknown)
};

// The model as trained: cfg.model's architecture on `grid` (validated: ConfigError naming
// the key).
models::FieldEmulatorConfig field_emulator_config(const RunConfig& cfg, const FieldGrid& grid);

// The field emulator of `arch` on `mesh` (tensor parallelism applied by its constructor),
// with model.activation_checkpointing applied before data parallelism wraps it, so that a
// checkpointed block becomes one dp unit. Its parameters are zero (see start_training).
// Collective over the mesh's tp and domain groups.
struct BuiltFieldEmulator {
  std::unique_ptr<models::FieldEmulator> model;
  std::size_t checkpointed_blocks = 0;
};
BuiltFieldEmulator build_field_emulator(const RunConfig& cfg, const models::FieldEmulatorConfig& arch,
                                        const Mesh& mesh);

// The same master weights at every layout (counter-based init from schedule.seed), then
// data parallelism (null with parallelism.data none). Collective over the mesh.
std::unique_ptr<dp::DataParallel> start_training(const RunConfig& cfg, nn::Module& model, const Mesh& mesh);

// Forward, the latitude-weighted MSE to `target` and backward: every parameter's gradient
// holds this rank's part, before any reduction. Returns the loss (this dp replica's).
// Collective over the mesh's tp and domain groups.
double field_emulator_forward_backward(models::FieldEmulator& model, const Tensor& input, const Tensor& target);

// Throws ConfigError ("<key>: the model in '<file>' differs from this config's: ...")
// when a checkpoint's metadata describes another architecture than `arch`: checked
// before any weight is read, since the same names could hold other shapes.
void check_saved_field_emulator(const io::CheckpointMetadata& header, const models::FieldEmulatorConfig& arch,
                                const std::string& key);
// The first line where two YAML texts differ ("checkpoint has 'width: 8', this run has
// 'width: 16'"), for "the checkpoint's model differs" errors.
std::string first_difference(const std::string& a, const std::string& b);

// One optimizer step over the model's parameters: begin(), then per micro-batch
// before_backward(micro) and its forward/backward, then finish(step).
class TrainingStep {
 public:
  // `total_steps` is schedule.steps (the learning-rate schedule's end). The model, mesh
  // and data parallelism must outlive the step.
  TrainingStep(const OptimizerConfig& optimizer, std::int64_t total_steps, const Mesh& mesh, nn::Module& model,
               dp::DataParallel* data_parallel);

  Optimizer& optimizer() { return *optimizer_; }
  const NamedParameters& parameters() const { return params_; }
  double learning_rate(std::int64_t step) const;

  // The model's backward already sums its parameters' gradients over the mesh's domain
  // group (an imported graph split over it: OnnxModel::split_over), so finish() skips the
  // domain reduction, which would count them domain-size times. Default false.
  void set_gradients_summed_over_domain(bool summed) { gradients_summed_over_domain_ = summed; }

  // Zeroes the gradients. The first call (and the first after weights_loaded()) also
  // notes, locally, whether a parameter is already NaN or Inf (from a checkpoint or an
  // initialisation): a later non-finite loss is then blamed on it, not on the lr.
  void begin();
  // Weights were loaded into the model (a restore): the next begin() checks them again.
  void weights_loaded() { start_checked_ = false; }
  // This rank's loss of (1-based) step `step` is NaN or Inf: notes, locally, what the
  // step's batch holds (`batch_problem`: a sentence naming a non-finite value of the
  // batch, "" when it is finite), for the divergence report of finish(). The first such
  // step is kept. No communication.
  void note_non_finite_loss(std::int64_t step, const std::string& batch_problem);
  // Before the backward of micro-batch `micro` of optimizer.accumulate: only the last one
  // starts the dp reduction.
  void before_backward(std::int64_t micro);
  // Ends (1-based) step `step`: the three reductions of the mesh (each a no-op where its
  // group has one rank), the average over the micro-batches, then the global gradient
  // norm (clipped when optimizer.clip_grad_norm > 0, otherwise measured when
  // `measure_norm`), the divergence check (every rank stops together: the norm comes from
  // one all-reduce), the learning rate and the update. Returns the norm (NaN when neither
  // clipped nor measured). Collective over the mesh.
  // A norm that is not finite is reported by its cause, the same InvalidArgument on every
  // rank: a non-finite value of the batch of the first step whose loss was not finite
  // (its note), else a parameter that was NaN or Inf before the first step (begin()),
  // else a divergence ("lower optimizer.lr or set optimizer.clip_grad_norm").
  double finish(std::int64_t step, bool measure_norm);

 private:
  // The report of a gradient norm that is not finite at `step` (collective; throws).
  [[noreturn]] void report_divergence(std::int64_t step, double grad_norm);

  // Local notes for report_divergence.
  bool start_checked_ = false;
  std::string start_problem_;  // "parameter 'x' holds NaN" at the first step, or ""
  std::int64_t first_bad_loss_step_ = -1;
  std::string bad_loss_batch_;  // what that step's batch held ("" when finite)
  bool gradients_summed_over_domain_ = false;
  OptimizerConfig config_;
  std::int64_t total_steps_;
  const Mesh& mesh_;
  nn::Module& model_;
  dp::DataParallel* data_parallel_;
  NamedParameters params_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace tessera::train
