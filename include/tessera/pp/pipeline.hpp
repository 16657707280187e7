#pragma once
// Pipeline: runs one stage of a model split over mesh.pp() (pp/stages.hpp) through a
// schedule (pp/schedule.hpp), sending activations forward and their gradients backward
// point to point between neighbouring stages.
//
// Per step, on every rank of the mesh:
//     double loss = pipeline.train_step(batch, loss_fn);  // every microbatch's F and B
//     data_parallel.finish_gradient_sync();               // as without a pipeline
//     tp::sync_replicated_gradients(model, mesh.tp());
//     optimizer.step();
// `batch` is read on stage 0 only (other stages may pass an undefined tensor); it is cut
// along dim 0 into `microbatches` pieces of shard_range's sizes. `loss_fn` runs on the
// last stage, once per microbatch: it gets the stage's output and the rows of the batch
// the microbatch holds, returns that microbatch's share of the step's loss and fills
// the gradient of that share with respect to the output (for a mean over the batch,
// scale by the microbatch's rows over the batch's). The step's loss, the sum of the
// shares, is broadcast from the last stage over mesh.pp(), so every rank returns it.
// Parameter gradients accumulate over the microbatches (zero them between steps as
// without a pipeline); the sum equals the whole batch's gradient up to rounding.
// A batch stage 0 refuses (fewer rows than microbatches, undefined, 0-dim; evaluate: no
// rows) raises InvalidArgument with stage 0's reason: the refusal replaces the first
// header, so no stage waits for it, and nothing is left in flight. An error on one stage
// mid-step (a unit's forward or backward, the loss function, a gradient of the wrong
// shape) stops that stage's computing but not its messages: failure headers replace the
// activations it still owes, zeros the gradients, and the stages after it do the same.
// Either way the step ends with an agreement over mesh.world() (agree_on_success), so
// every rank, other dp replicas included, raises the lowest failing rank's error; the
// gradients are then undefined (zero them), the parameters unchanged.
//
// Inside a stage, the units are ordinary modules: tensor-parallel and domain-parallel
// layers work unchanged (every rank of a tp or domain group runs the same schedule, so
// their collectives match). A tensor crossing a stage boundary must be whole on every
// rank of the tp group (Replicate: no sequence-parallel shards across a boundary), and
// each rank sends to the rank of the next stage with the same dp, tp and domain
// coordinates.
//
// Activations: a tessera Module caches the state of its last forward only (the layers'
// members), so a stage that runs another microbatch's forward before a backward must keep
// the earlier microbatch's caches somewhere. Two ways (PipelineOptions::activations):
//   stash      (default) after a forward, when another forward comes before this
//              microbatch's backward, the stage's caches move into a per-microbatch
//              stash (nn::Module::stash_activations, handles only, no copy) and move back
//              before its backward: every forward runs once, and a stage holds the
//              activations of its microbatches in flight (GPipe: m, 1F1B: at most p - s).
//   recompute  the stage keeps only the *input* of each microbatch in flight and re-runs
//              its forward on it before the backward (full recomputation at stage
//              granularity, bitwise the same result): less memory, one more forward per
//              microbatch on the stages that need it.
// Both give bitwise the same gradients. The last stage under 1F1B, and the last
// microbatch's backward under GPipe, need neither.
//
// Communication: every send is non-blocking (Communicator::isend) and is completed at
// the end of the step; the receives of the gradients are posted in the stage's backward
// order, each once the matching activation is sent (1F1B: right after it), and an
// activation's receive as soon as its shape (a small header message) has arrived, so
// transfers overlap the stage's compute. CUDA tensors travel through NCCL channels
// between neighbouring stages when each rank has its own GPU (the constructor opens
// them, collectively over mesh.pp(); Communicator::prepare_point_to_point), which match
// messages in posting order: hence the backward order. Collective over the whole mesh:
// every rank must call train_step with the same options.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/pp/schedule.hpp"
#include "tessera/pp/stages.hpp"
#include "tessera/pp/tied_parameters.hpp"

namespace tessera::pp {

namespace detail {
class StageTies;
}

// How a stage keeps a microbatch's activations until its backward (see above).
enum class StageActivations { stash, recompute };
std::string_view stage_activations_name(StageActivations activations) noexcept;  // "stash" | "recompute"
// "stash" | "recompute"; ConfigError naming `key`, the value and both names otherwise.
StageActivations parse_stage_activations(std::string_view text, std::string_view key = "activations");

struct PipelineOptions {
  Schedule schedule = Schedule::one_f_one_b;
  StageActivations activations = StageActivations::stash;
  int microbatches = 1;                 // >= 1, at most the batch's rows
  std::vector<std::string> cut_points;  // where stages 1.. begin; empty: by layer count
  std::vector<int> units_per_stage;     // by layer count, given per stage; empty: even
  // Parameters read by a unit other than their owner (a tied LM head): the pipeline keeps
  // the reader's stage in step with the owner's (tessera/pp/tied_parameters.hpp).
  std::vector<TiedParameter> tied;
};

// What the loss function is told about a microbatch: its index and rows [begin, end) of
// a batch of `batch_rows`.
struct Microbatch {
  int index = 0;
  std::int64_t begin = 0, end = 0;
  std::int64_t batch_rows = 0;
};

// Returns the microbatch's share of the loss; writes d(share)/d(output) into `grad`.
using LossFunction = std::function<double(const Tensor& output, const Microbatch& microbatch, Tensor& grad)>;
// Evaluation: returns the microbatch's share of the loss, no gradient.
using EvaluationLoss = std::function<double(const Tensor& output, const Microbatch& microbatch)>;

// Time spent per stage in the last train_step (for the bubble benchmark).
struct StepTimes {
  double total_seconds = 0;    // the step, from the first action to the last send completed
  double compute_seconds = 0;  // forward, recompute, backward and loss, summed
};

// Pipeline::tied_replica_bytes: the replicas' values and their gradients.
struct TiedReplicaBytes {
  std::int64_t values = 0;
  std::int64_t gradients = 0;
};

class Pipeline {
 public:
  // Splits `model` (a Sequential: pp/stages.hpp) into mesh.pp_size() stages and keeps
  // this rank's (keep_stage). Every stage must make the same split: the split is
  // computed from the same model on every rank, and a split whose stage count differs
  // from the mesh's is an InvalidArgument. With activations `stash` the constructor is
  // collective over mesh.world(): each stage checks that its units list their caches
  // (nn::require_stashable) and the verdict is agreed, so a refused layer is the same
  // InvalidArgument on every rank. A unit replaced after construction (a data-parallel
  // wrapper) must list its caches too (the library's wrappers do): the check is not
  // repeated per step, and a stage meeting an unlisted layer mid-step fails the step (on
  // every rank, as any failure mid-step does: see the top of this file). The
  // model and the mesh must outlive the pipeline.
  Pipeline(nn::Module& model, const Mesh& mesh, PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  double train_step(const Tensor& batch, const LossFunction& loss_fn);

  // Forward only (validation): the batch's microbatches flow through the stages in
  // order, `loss_fn` runs on the last stage per microbatch, and the sum of its shares is
  // returned on every rank, as train_step's loss is. No gradient changes and no
  // activation is kept. The batch is cut into min(microbatches, its rows) pieces, so a
  // short last batch of a validation set needs no other options. Collective over the
  // whole mesh, like train_step; call it between steps.
  double evaluate(const Tensor& batch, const EvaluationLoss& loss_fn);

  int stage() const { return stage_; }
  int stages() const { return static_cast<int>(split_.stages.size()); }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages() - 1; }
  const StageSplit& split() const { return split_; }
  const std::vector<std::string>& units() const { return split_.stages[static_cast<std::size_t>(stage_)]; }
  const PipelineOptions& options() const { return options_; }
  const std::vector<Action>& actions() const { return actions_; }
  const StepTimes& last_step_times() const { return times_; }
  // Forward passes re-run before a backward in the last step (activations: recompute),
  // and stashes put back before a backward (activations: stash); see above.
  int last_step_recomputes() const { return recomputes_; }
  int last_step_restores() const { return restores_; }
  // Bytes this stage holds for replicas of tied parameters it reads but does not own
  // (PipelineOptions::tied). A replica is not a parameter of the stage, so
  // measure_memory and plan_memory do not see it; 0 on the other stages. During a step
  // the received value takes as much again, on the host.
  TiedReplicaBytes tied_replica_bytes() const;

  // This stage's forward and backward over its units (no communication besides the
  // units' own tp / domain collectives).
  Tensor stage_forward(const Tensor& input);
  Tensor stage_backward(const Tensor& grad_output);

 private:
  nn::Module& model_;
  const Mesh& mesh_;
  PipelineOptions options_;
  StageSplit split_;
  int stage_ = 0;
  std::vector<Action> actions_;
  StepTimes times_;
  int recomputes_ = 0;
  int restores_ = 0;
  std::unique_ptr<detail::StageTies> ties_;  // options_.tied on this stage
};

}  // namespace tessera::pp
