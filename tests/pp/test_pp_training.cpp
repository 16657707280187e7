// Pipeline training against its serial twin: a Sequential of Linear blocks trained for
// kSteps steps with SGD (momentum) or AdamW, GPipe or 1F1B, 1, 3 or 4 microbatches, the
// stages keeping their activations in stashes or recomputing them. After
// every step the reported loss (the same on every rank), every gradient and every master
// weight the stage holds equal the serial model's trained on the whole batch, to fp32
// rounding (relative 1e-5).
//
// At 1 rank: pipeline 1. At 2 ranks: pipeline 2 (even split). At 4 ranks: pipeline 4;
// pipeline 2 x tp 2 (cut point "1": each block's column/row pair inside one stage);
// pipeline 2 x dp 2 under ddp (units_per_stage {5, 3}), the serial twin trained on both
// replicas' rows.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mpi_test.hpp"
#include "pp_test_util.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/mesh.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 8;  // rows of the global batch
constexpr std::uint64_t kSeed = 4242;

struct Layout {
  ParallelismConfig config;
  pp::PipelineOptions split;  // cut points or counts (schedule and microbatches set per case)
  std::string name;
};

std::vector<Layout> layouts() {
  if (world_size() == 1) return {{{DataParallelMode::none, 1, 1, 1}, {}, "pipeline 1"}};
  if (world_size() == 2) return {{{DataParallelMode::none, 1, 1, 2}, {}, "pipeline 2"}};
  pp::PipelineOptions cut;
  cut.cut_points = {"1"};
  pp::PipelineOptions counts;
  counts.units_per_stage = {5, 3};
  return {{{DataParallelMode::none, 1, 1, 4}, {}, "pipeline 4"},
          {{DataParallelMode::none, 2, 1, 2}, cut, "pipeline 2 x tp 2"},
          {{DataParallelMode::ddp, 1, 1, 2}, counts, "pipeline 2 x dp 2 (ddp)"}};
}

std::unique_ptr<Optimizer> make_optimizer(bool adamw, nn::Module& model) {
  if (adamw) return std::make_unique<AdamW>(model.named_parameters(), AdamWOptions{.lr = 1e-2});
  return std::make_unique<Sgd>(model.named_parameters(), SgdOptions{.lr = 0.05, .momentum = 0.9});
}

Tensor batch_input(int step) { return random_tensor({kBatch, kWidth}, 700 + static_cast<std::uint64_t>(step)); }
Tensor batch_target(int step) { return random_tensor({kBatch, kOut}, 900 + static_cast<std::uint64_t>(step)); }

// How many of the stage's backward passes find another microbatch's caches in the
// units (and so need a restore or a recompute), read off the action list.
int backwards_after_another_forward(const std::vector<pp::Action>& actions) {
  int count = 0, cached = -1;
  for (const pp::Action& a : actions) {
    if (a.kind == pp::Action::Kind::forward) {
      cached = a.microbatch;
    } else {
      count += cached != a.microbatch;
      cached = -1;
    }
  }
  return count;
}

struct StepLoss {
  double own;             // the loss train_step returned here (this replica's)
  double replicas_mean;   // its mean over the dp replicas: the whole batch's loss
};

// One pipelined step on this replica's rows of the global batch (x, t), the gradients
// synchronised over dp and tp as without a pipeline.
StepLoss pipelined_step(pp::Pipeline& pipeline, const Mesh& mesh, nn::Module& model, dp::DataParallel* ddp,
                        const Tensor& x, const Tensor& t) {
  const std::int64_t rows = x.size(0) / mesh.dp_size();
  const std::int64_t first_row = rows * mesh.coords().dp;
  const Tensor local_x = x.narrow(0, first_row, rows).contiguous();
  const Tensor local_t = t.narrow(0, first_row, rows).contiguous();
  const double loss = pipeline.train_step(pipeline.is_first() ? local_x : Tensor(),
                                          [&](const Tensor& out, const pp::Microbatch& mb, Tensor& grad) {
                                            return mse_share(out, local_t, mb, grad);
                                          });
  if (ddp) ddp->finish_gradient_sync();
  if (mesh.tp_size() > 1) tp::sync_replicated_gradients(model, mesh.tp());
  Tensor mean = Tensor::from_vector<double>({loss}, {1});
  mesh.dp().all_reduce(mean, ReduceOp::avg);
  return {loss, mean.to_vector<double>()[0]};
}

// The blocks model at `layout` as the tests below train it: tp-parallelised, split into
// the pipeline's stages, initialised from kSeed, under ddp (without overlap) when dp > 1.
struct PipelinedBlocks {
  Mesh mesh;
  std::unique_ptr<nn::Sequential> model = make_blocks_model();
  std::unique_ptr<pp::Pipeline> pipeline;
  std::unique_ptr<dp::DataParallel> ddp;

  PipelinedBlocks(const Layout& layout, pp::Schedule schedule, int microbatches,
                  pp::StageActivations activations = pp::StageActivations::stash)
      : mesh(MPI_COMM_WORLD, layout.config) {
    if (mesh.tp_size() > 1) tp::parallelize(*model, mesh, blocks_tp_plan());
    pp::PipelineOptions options = layout.split;
    options.schedule = schedule;
    options.microbatches = microbatches;
    options.activations = activations;
    pipeline = std::make_unique<pp::Pipeline>(*model, mesh, options);
    nn::initialize_parameters(*model, kSeed);
    if (mesh.dp_size() > 1) {
      ddp = std::make_unique<dp::DataParallel>(*model, mesh, dp::DataParallelOptions{.overlap = false});
    }
  }
  StepLoss step(const Tensor& x, const Tensor& t) { return pipelined_step(*pipeline, mesh, *model, ddp.get(), x, t); }
};

void run_case(const Layout& layout, pp::Schedule schedule, int microbatches, bool adamw,
              pp::StageActivations activations) {
  const std::string what = layout.name + ", " + std::string(pp::schedule_name(schedule)) + ", m " +
                           std::to_string(microbatches) + (adamw ? ", AdamW" : ", SGD") + ", " +
                           std::string(pp::stage_activations_name(activations));
  SCOPED_TRACE(what);
  auto serial = make_blocks_model();
  nn::initialize_parameters(*serial, kSeed);
  auto serial_opt = make_optimizer(adamw, *serial);

  PipelinedBlocks blocks(layout, schedule, microbatches, activations);
  const Mesh& mesh = blocks.mesh;
  nn::Module& model = *blocks.model;
  const pp::Pipeline& pipeline = *blocks.pipeline;
  auto optimizer = make_optimizer(adamw, model);

  // The stage holds exactly the parameters of its units.
  std::size_t expected_params = 0;
  for (const auto& path : pipeline.units()) expected_params += serial->at(path).named_parameters().size();
  ASSERT_EQ(model.named_parameters().size(), expected_params);
  ASSERT_EQ(pipeline.stage(), mesh.coords().pp);

  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = batch_input(step), t = batch_target(step);

    serial_opt->zero_grad();
    const Tensor y = serial->forward(x);
    Tensor dy;
    const double serial_loss = mse_share(y, t, {0, 0, kBatch, kBatch}, dy);
    serial->backward(dy);

    optimizer->zero_grad();
    const StepLoss loss = blocks.step(x, t);

    // The replica's loss is on every rank of its pipeline; the replicas' mean is the
    // serial loss of the whole batch (equal shares).
    const std::vector<std::string> all = all_gather_strings(std::to_string(loss.own), mesh.pp().mpi_comm());
    for (const auto& s : all) EXPECT_EQ(s, all.front()) << "the loss differs between stages";
    EXPECT_NEAR(loss.replicas_mean, serial_loss, 1e-5 * std::abs(serial_loss));

    expect_stage_matches(*serial, model, true, what + " (gradients)");
    serial_opt->step();
    optimizer->step();
    expect_stage_matches(*serial, model, false, what + " (weights)");

    // Restores (stash) or recomputes are exactly what the schedule needs: none on the
    // last stage under 1F1B; GPipe every microbatch but the last. The other count is 0:
    // a stash never recomputes, and every forward runs once.
    const int needed = backwards_after_another_forward(pipeline.actions());
    if (schedule == pp::Schedule::gpipe) {
      EXPECT_EQ(needed, microbatches - 1);
    } else if (pipeline.is_last()) {
      EXPECT_EQ(needed, 0);
    }
    const bool stash = activations == pp::StageActivations::stash;
    EXPECT_EQ(pipeline.last_step_restores(), stash ? needed : 0);
    EXPECT_EQ(pipeline.last_step_recomputes(), stash ? 0 : needed);
  }
}

TEST(PipelineTraining, MatchesSerialTraining) {
  for (const Layout& layout : layouts()) {
    for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
      for (int m : {1, 3, 4}) {
        // Both optimizers with the default stash; SGD alone covers recompute (the
        // optimizer does not see how the stage kept its activations).
        for (bool adamw : {false, true}) run_case(layout, schedule, m, adamw, pp::StageActivations::stash);
        run_case(layout, schedule, m, false, pp::StageActivations::recompute);
      }
    }
  }
}

// Pipeline::evaluate (forward only) gives the serial model's loss on every rank, for a
// full batch and for one shorter than the microbatch count (m = min(microbatches, rows)),
// changes no gradient, and leaves the stages ready for a training step that still
// matches the serial one.
TEST(PipelineTraining, EvaluateMatchesTheSerialForward) {
  for (const Layout& layout : layouts()) {
    for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
      SCOPED_TRACE(layout.name + ", " + std::string(pp::schedule_name(schedule)));
      auto serial = make_blocks_model();
      nn::initialize_parameters(*serial, kSeed);
      PipelinedBlocks blocks(layout, schedule, /*microbatches=*/3);
      const Mesh& mesh = blocks.mesh;
      nn::Module& model = *blocks.model;
      pp::Pipeline& pipeline = *blocks.pipeline;
      model.zero_grad();
      serial->zero_grad();

      // Each replica evaluates its own rows; a batch of 2 rows makes 2 microbatches.
      for (std::int64_t batch_rows : {kBatch / mesh.dp_size(), std::int64_t{2}}) {
        SCOPED_TRACE("batch of " + std::to_string(batch_rows) + " rows per replica");
        const Tensor x = batch_input(5).narrow(0, 0, batch_rows * mesh.dp_size()).contiguous();
        const Tensor t = batch_target(5).narrow(0, 0, batch_rows * mesh.dp_size()).contiguous();
        Tensor unused;
        const double serial_loss =
            mse_share(serial->forward(x), t, {0, 0, x.size(0), x.size(0)}, unused);
        const std::int64_t first_row = batch_rows * mesh.coords().dp;
        const Tensor local_x = x.narrow(0, first_row, batch_rows).contiguous();
        const Tensor local_t = t.narrow(0, first_row, batch_rows).contiguous();
        int calls = 0;
        const double loss = pipeline.evaluate(pipeline.is_first() ? local_x : Tensor(),
                                              [&](const Tensor& out, const pp::Microbatch& mb) {
                                                ++calls;
                                                EXPECT_EQ(mb.batch_rows, batch_rows);
                                                Tensor g;
                                                return mse_share(out, local_t, mb, g);
                                              });
        EXPECT_EQ(calls, pipeline.is_last() ? std::min<std::int64_t>(3, batch_rows) : 0);
        Tensor mean = Tensor::from_vector<double>({loss}, {1});
        mesh.dp().all_reduce(mean, ReduceOp::avg);
        EXPECT_NEAR(mean.to_vector<double>()[0], serial_loss, 1e-5 * std::abs(serial_loss));
        const std::vector<std::string> all = all_gather_strings(std::to_string(loss), mesh.pp().mpi_comm());
        for (const auto& s : all) EXPECT_EQ(s, all.front()) << "the loss differs between stages";
      }
      // No gradient moved (zero as set above, on every stage) ...
      serial->zero_grad();
      expect_stage_matches(*serial, model, true, layout.name + " after evaluate (gradients)");
      // ... and a training step after it matches the serial one.
      const Tensor x = batch_input(0), t = batch_target(0);
      Tensor dy;
      const double serial_loss = mse_share(serial->forward(x), t, {0, 0, kBatch, kBatch}, dy);
      serial->backward(dy);
      EXPECT_NEAR(blocks.step(x, t).replicas_mean, serial_loss, 1e-5 * std::abs(serial_loss));
      expect_stage_matches(*serial, model, true, layout.name + " step after evaluate (gradients)");
    }
  }
}

}  // namespace

namespace {

Tensor doubled(const Tensor& x) {
  Tensor y = x.contiguous().clone();
  ops::scale(y, 2.0);
  return y;
}

// A user layer that caches its input but does not list it (no visit_activations).
class UnlistedScale final : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    input_ = x;
    return doubled(x);
  }
  Tensor backward(const Tensor& dy) override {
    if (!input_.defined()) throw InvalidArgument("UnlistedScale: backward without a forward");
    return doubled(dy);
  }
  std::string type_name() const override { return "UnlistedScale"; }

 private:
  Tensor input_;
};

std::unique_ptr<nn::Sequential> model_with_unlisted_layer() {
  auto root = std::make_unique<nn::Sequential>();
  root->append(std::make_unique<nn::Linear>(kWidth, kWidth));
  root->append(std::make_unique<UnlistedScale>());
  root->append(std::make_unique<nn::Linear>(kWidth, kOut));
  return root;
}

}  // namespace

// A stash cannot see an unlisted layer's caches, so the pipeline refuses it before the
// first step, on every rank (the stage without it too: no stage is left waiting), naming
// the unit; recompute needs no list and trains it like the serial model.
TEST(PipelineTraining, AnUnlistedLayerIsRefusedForStashAndTrainsWithRecompute) {
  const int world = world_size();
  ParallelismConfig config{DataParallelMode::none, world == 4 ? 2 : 1, 1, world == 4 ? 2 : world};
  Mesh mesh(MPI_COMM_WORLD, config);
  {
    auto model = model_with_unlisted_layer();
    try {
      pp::Pipeline pipeline(*model, mesh, pp::PipelineOptions{.microbatches = 2});
      ADD_FAILURE() << "expected an InvalidArgument for the unlisted layer";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'1' (UnlistedScale)"), std::string::npos) << what;
      EXPECT_NE(what.find("visit_activations"), std::string::npos) << what;
      EXPECT_NE(what.find("pipeline.activations: recompute"), std::string::npos) << what;
    }
  }
  auto serial = model_with_unlisted_layer();
  nn::initialize_parameters(*serial, kSeed);
  const Tensor x = batch_input(0), t = batch_target(0);
  Tensor dy;
  const double serial_loss = mse_share(serial->forward(x), t, {0, 0, kBatch, kBatch}, dy);
  serial->backward(dy);

  auto model = model_with_unlisted_layer();
  pp::Pipeline pipeline(*model, mesh,
                        pp::PipelineOptions{.schedule = pp::Schedule::gpipe,
                                            .activations = pp::StageActivations::recompute,
                                            .microbatches = 4});
  nn::initialize_parameters(*model, kSeed);
  const double loss = pipeline.train_step(pipeline.is_first() ? x : Tensor(),
                                          [&](const Tensor& out, const pp::Microbatch& mb, Tensor& grad) {
                                            return mse_share(out, t, mb, grad);
                                          });
  EXPECT_NEAR(loss, serial_loss, 1e-5 * std::abs(serial_loss));
  expect_stage_matches(*serial, *model, true, "unlisted layer, recompute (gradients)");
}

// A batch that stage 0 refuses (undefined, too few rows for the microbatches, no rows to
// evaluate) raises InvalidArgument on every stage, each naming stage 0's reason: the
// refusal travels down the pipeline in place of the first header, so no stage is left
// waiting for a microbatch that will not come (before, the later stages kept waiting and
// took the next step's messages for the refused step's). The pipeline stays usable: a
// good step after the refusals still equals the serial one.
TEST(PipelineTraining, StageZerosRefusalOfABatchRaisesOnEveryStage) {
  for (const Layout& layout : layouts()) {
    for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
      SCOPED_TRACE(layout.name + ", " + std::string(pp::schedule_name(schedule)));
      PipelinedBlocks blocks(layout, schedule, /*microbatches=*/4);
      nn::Module& model = *blocks.model;
      pp::Pipeline& pipeline = *blocks.pipeline;

      int loss_calls = 0;
      const auto count_train = [&](const Tensor&, const pp::Microbatch&, Tensor&) { return ++loss_calls, 0.0; };
      const auto count_eval = [&](const Tensor&, const pp::Microbatch&) { return ++loss_calls, 0.0; };
      // Agreed over the mesh: every rank raises the refusal of the lowest refusing rank
      // (rank 0, stage 0's first rank, unless only another dp replica refuses).
      const auto expect_refused = [&](const std::string& what, const std::string& reason, auto&& call,
                                      int refusing_rank = 0) {
        SCOPED_TRACE(what);
        try {
          call();
          ADD_FAILURE() << "stage " << pipeline.stage() << " did not raise";
        } catch (const InvalidArgument& e) {
          const std::string message = e.what();
          EXPECT_NE(message.find("stage 0 needs " + reason), std::string::npos) << message;
          const std::string where = "(on rank " + std::to_string(refusing_rank) + " of " + std::to_string(world_size()) + ")";
          EXPECT_NE(message.find(where), std::string::npos) << message;
        }
      };
      const Tensor three_rows = batch_input(0).narrow(0, 0, 3).contiguous();
      const Tensor no_rows = Tensor::empty({0, kWidth}, DType::f32);
      expect_refused("3 rows for 4 microbatches", "a batch of at least 4 rows for 4 microbatches, got 3", [&] {
        (void)pipeline.train_step(pipeline.is_first() ? three_rows : Tensor(), count_train);
      });
      expect_refused("undefined batch", "a batch with a leading batch dim", [&] {
        (void)pipeline.train_step(Tensor(), count_train);
      });
      expect_refused("0-dim batch", "a batch with a leading batch dim", [&] {
        (void)pipeline.train_step(pipeline.is_first() ? Tensor::from_vector<float>({1.0F}, {}) : Tensor(),
                                  count_train);
      });
      expect_refused("evaluate, no rows", "a batch with at least one row along dim 0, got 0 rows", [&] {
        (void)pipeline.evaluate(pipeline.is_first() ? no_rows : Tensor(), count_eval);
      });
      EXPECT_EQ(loss_calls, 0);
      for (const auto& [name, p] : model.named_parameters()) {
        if (!p->grad.defined()) continue;
        const auto g = p->grad.contiguous().to_vector<float>();
        EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0F; }))
            << name << " got a gradient from a refused step";
      }

      // Only dp replica 1 refuses its batch: the other replica's pipeline takes its own
      // (its last stage runs the loss function), then raises the same refusal rather than
      // wait for replica 1 in the next collective.
      if (blocks.mesh.dp_size() > 1) {
        const Tensor good = batch_input(0).narrow(0, 0, kBatch / blocks.mesh.dp_size()).contiguous();
        expect_refused(
            "3 rows on dp replica 1 only", "a batch of at least 4 rows for 4 microbatches, got 3",
            [&] {
              const Tensor mine = blocks.mesh.coords().dp == 1 ? three_rows : good;
              (void)pipeline.train_step(pipeline.is_first() ? mine : Tensor(), count_train);
            },
            /*refusing_rank=*/1);
      }

      // Nothing of the refusals is left in flight: the next step is the serial one.
      auto serial = make_blocks_model();
      nn::initialize_parameters(*serial, kSeed);
      const Tensor x = batch_input(1), t = batch_target(1);
      Tensor dy;
      const double serial_loss = mse_share(serial->forward(x), t, {0, 0, kBatch, kBatch}, dy);
      serial->backward(dy);
      model.zero_grad();
      EXPECT_NEAR(blocks.step(x, t).replicas_mean, serial_loss, 1e-5 * std::abs(serial_loss));
      expect_stage_matches(*serial, model, true, layout.name + ", after the refusals (gradients)");
    }
  }
}

// A unit's stand-in that runs the unit and raises at a chosen forward or backward call
// (counted from arm()): a failure of one stage mid-step. It registers the unit's
// parameters under their own names, so the FQNs, the optimizer and the checks above see
// the same parameters.
class Tripwire final : public nn::Module {
 public:
  explicit Tripwire(std::unique_ptr<nn::Module> inner) : inner_(std::move(inner)) {
    for (auto& [name, p] : inner_->named_parameters()) register_parameter(name, *p);
  }
  void arm(int forward, int backward) {
    trip_forward_ = forward;
    trip_backward_ = backward;
    forwards_ = backwards_ = 0;
  }
  Tensor forward(const Tensor& x) override {
    if (forwards_++ == trip_forward_) throw InvalidArgument("tripwire: forward call " + std::to_string(trip_forward_));
    return inner_->forward(x);
  }
  Tensor backward(const Tensor& grad) override {
    if (backwards_++ == trip_backward_) {
      throw InvalidArgument("tripwire: backward call " + std::to_string(trip_backward_));
    }
    return inner_->backward(grad);
  }
  void visit_activations(nn::ActivationVisitor& visitor) override { inner_->visit_activations(visitor); }
  std::string type_name() const override { return "Tripwire(" + inner_->type_name() + ")"; }

 private:
  std::unique_ptr<nn::Module> inner_;
  int trip_forward_ = -1, trip_backward_ = -1;
  int forwards_ = 0, backwards_ = 0;
};

// A failure on one stage in the middle of a step or an evaluation (a unit's forward or
// backward, the loss function raising or giving a gradient of the wrong shape, on every
// dp replica or on one) raises the failing rank's error on every rank of the mesh, and
// leaves nothing in flight: after zero_grad the next step is the serial one. The stages
// after the failure used to wait for activations that never came, those before it for
// gradients, and the other dp replicas in their next collective.
TEST(PipelineTraining, AFailureOnOneStageRaisesOnEveryRank) {
  const Tensor x = batch_input(2), t = batch_target(2);
  auto serial = make_blocks_model();
  nn::initialize_parameters(*serial, kSeed);
  Tensor dy;
  const double serial_loss = mse_share(serial->forward(x), t, {0, 0, kBatch, kBatch}, dy);
  serial->backward(dy);

  for (const Layout& layout : layouts()) {
    for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
      for (auto activations : {pp::StageActivations::stash, pp::StageActivations::recompute}) {
        SCOPED_TRACE(layout.name + ", " + std::string(pp::schedule_name(schedule)) + ", " +
                     std::string(pp::stage_activations_name(activations)));
        PipelinedBlocks blocks(layout, schedule, /*microbatches=*/4, activations);
        const Mesh& mesh = blocks.mesh;
        pp::Pipeline& pipeline = *blocks.pipeline;
        const int stages = pipeline.stages(), ranks_per_stage = world_size() / stages;
        // The middle stage's first unit carries the tripwire.
        const int victim = stages / 2;
        Tripwire* wire = nullptr;
        if (pipeline.stage() == victim) {
          const std::string path = pipeline.units().front();
          auto wrapped = std::make_unique<Tripwire>(blocks.model->replace(path, std::make_unique<nn::GELU>()));
          wire = wrapped.get();
          (void)blocks.model->replace(path, std::move(wrapped));
        }
        const std::int64_t rows = kBatch / mesh.dp_size();
        const Tensor local_x = x.narrow(0, rows * mesh.coords().dp, rows).contiguous();
        const Tensor local_t = t.narrow(0, rows * mesh.coords().dp, rows).contiguous();
        auto train = [&](const pp::LossFunction& loss_fn) {
          (void)pipeline.train_step(pipeline.is_first() ? local_x : Tensor(), loss_fn);
        };
        auto evaluate = [&](const pp::EvaluationLoss& loss_fn) {
          (void)pipeline.evaluate(pipeline.is_first() ? local_x : Tensor(), loss_fn);
        };
        const pp::LossFunction good_loss = [&](const Tensor& y, const pp::Microbatch& mb, Tensor& grad) {
          return mse_share(y, local_t, mb, grad);
        };
        const pp::EvaluationLoss good_eval = [&](const Tensor& y, const pp::Microbatch& mb) {
          Tensor unused;
          return mse_share(y, local_t, mb, unused);
        };

        // Runs `call` with the tripwire armed at (forward, backward) on `armed_dp` (-1:
        // every dp replica) and expects `text` raised on every rank from `failing_rank`.
        auto expect_raised = [&](const std::string& what, int forward, int backward, int armed_dp,
                                 const std::string& text, int failing_rank, auto&& call) {
          SCOPED_TRACE(what);
          if (wire != nullptr && (armed_dp < 0 || armed_dp == mesh.coords().dp)) wire->arm(forward, backward);
          try {
            call();
            ADD_FAILURE() << "stage " << pipeline.stage() << " did not raise";
          } catch (const std::exception& e) {
            const std::string message = e.what();
            EXPECT_NE(message.find(text), std::string::npos) << message;
            const std::string where = "(on rank " + std::to_string(failing_rank) + " of " + std::to_string(world_size()) + ")";
            EXPECT_NE(message.find(where), std::string::npos) << message;
          }
          if (wire != nullptr) wire->arm(-1, -1);
          // Nothing in flight, no stale cache: a good step now is the serial one.
          blocks.model->zero_grad();
          EXPECT_NEAR(blocks.step(x, t).replicas_mean, serial_loss, 1e-5 * std::abs(serial_loss));
          expect_stage_matches(*serial, *blocks.model, true, layout.name + ", after: " + what);
        };
        const int victim_rank = victim * ranks_per_stage, last_rank = (stages - 1) * ranks_per_stage;
        expect_raised("a unit's second forward", 1, -1, -1, "tripwire: forward call 1", victim_rank,
                      [&] { train(good_loss); });
        expect_raised("a unit's first backward", -1, 0, -1, "tripwire: backward call 0", victim_rank,
                      [&] { train(good_loss); });
        expect_raised("the loss function on microbatch 2", -1, -1, -1, "the loss diverged", last_rank, [&] {
          train([&](const Tensor& y, const pp::Microbatch& mb, Tensor& grad) {
            if (mb.index == 2) throw std::runtime_error("the loss diverged");
            return mse_share(y, local_t, mb, grad);
          });
        });
        expect_raised("a gradient of the wrong shape", -1, -1, -1,
                      "the loss function must set the gradient to the output's shape", last_rank, [&] {
                        train([&](const Tensor& y, const pp::Microbatch& mb, Tensor& grad) {
                          const double share = mse_share(y, local_t, mb, grad);
                          grad = Tensor::zeros({1}, DType::f32);
                          return share;
                        });
                      });
        expect_raised("evaluate: a unit's first forward", 0, -1, -1, "tripwire: forward call 0", victim_rank,
                      [&] { evaluate(good_eval); });
        expect_raised("evaluate: the loss function on microbatch 1", -1, -1, -1, "the loss diverged", last_rank, [&] {
          evaluate([&](const Tensor& y, const pp::Microbatch& mb) {
            if (mb.index == 1) throw std::runtime_error("the loss diverged");
            Tensor unused;
            return mse_share(y, local_t, mb, unused);
          });
        });
        if (mesh.dp_size() > 1) {
          // One replica fails; the other's pipeline completes its step and raises too.
          expect_raised("a forward on dp replica 1 only", 2, -1, 1, "tripwire: forward call 2", victim_rank + 1,
                        [&] { train(good_loss); });
        }
      }
    }
  }
}

// fsdp2 and overlapped ddp count one forward and one backward per unit and step; under a
// pipeline a stage runs one per microbatch, and the first microbatch's backward would
// start the reduction of a gradient the others still add to (measured: the last stage's
// norm weight 15-35 % off). DataParallel refuses both on a pipeline mesh, on every rank,
// naming the option; ddp without overlap is what the training tests above use.
TEST(PipelineTraining, HookedDataParallelIsRefusedOnAPipelineMesh) {
  if (world_size() != 4) GTEST_SKIP() << "needs pipeline 2 x dp 2 (4 ranks)";
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1, 2});
  auto model = make_blocks_model();
  pp::PipelineOptions options;
  options.units_per_stage = {5, 3};
  pp::Pipeline pipeline(*model, mesh, options);
  for (auto mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    try {
      dp::DataParallel wrapped(*model, mesh, mode, dp::DataParallelOptions{.overlap = true});
      ADD_FAILURE() << data_parallel_mode_name(mode) << " with hooks was accepted on a pipeline mesh";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(mode == DataParallelMode::fsdp2 ? "fsdp2 is not supported on a mesh with pipeline 2"
                                                          : "option overlap is not supported on a mesh with pipeline 2"),
                std::string::npos)
          << what;
    }
  }
  dp::DataParallel plain(*model, mesh, dp::DataParallelOptions{.overlap = false});  // accepted
}
