// ddp and fsdp2 against the serial model trained on the union of the dp batches.
//
// At 4 ranks: dp 2 x tp 2 and dp 4; at 8 ranks: dp 2 x tp 2 x domain 2. The model is a
// domain-parallel 3x3 conv (its field split along latitude over the domain ranks, with
// sync_domain_gradients summing the partial gradients), a tp channel-MLP block and a
// dp-replicated-or-sharded 1x1 head. Each rank feeds its dp batch (from the
// DistributedSampler: tp/domain peers read the same samples, the domain ranks their
// latitude rows of them). Five AdamW steps, fp32, every local parameter block within
// relative 1e-5 of the serial master after every step; overlap on and off bit-identical;
// dp-rank-1 parameters perturbed before wrapping (the broadcast must undo it); dp
// collective counts per step; fsdp2's parameter + optimizer memory about 1/dp of ddp's.

#include <gtest/gtest.h>

#include "dp_test_util.hpp"
#include "mpi_test.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr int kSteps = 5;
constexpr std::int64_t kDataset = 10;

std::vector<ParallelismConfig> layouts() {
  if (world_size() == 8) return {{DataParallelMode::ddp, 2, 2}};
  if (world_size() == 4) return {{DataParallelMode::ddp, 2, 1}, {DataParallelMode::ddp, 1, 1}};
  return {{DataParallelMode::ddp, 1, 1}};
}

dp::SamplerOptions sampler_options() { return {.shuffle = true, .seed = 17, .drop_last = false}; }

struct ParallelRun {
  std::unique_ptr<FieldNet> model;
  std::unique_ptr<dp::DataParallel> data_parallel;
  std::unique_ptr<AdamW> optimizer;
};

ParallelRun make_parallel(const Mesh& mesh, DataParallelMode mode, bool overlap, std::size_t bucket_bytes) {
  ParallelRun run;
  run.model = std::make_unique<FieldNet>(&mesh);
  nn::initialize_parameters(*run.model, kSeed);
  tp::apply_tensor_parallel(*run.model, mesh.tp());
  if (mesh.coords().dp != 0) {
    // Drift that the broadcast from dp rank 0 must undo.
    for (Parameter* p : run.model->parameters()) ops::scale(p->value, 1.5);
  }
  run.data_parallel = std::make_unique<dp::DataParallel>(
      *run.model, mesh, mode, dp::DataParallelOptions{.bucket_bytes = bucket_bytes, .overlap = overlap});
  run.optimizer = std::make_unique<AdamW>(run.model->named_parameters(), AdamWOptions{.lr = 1e-2});
  return run;
}

// This rank's batch for `step`: its dp shard of the epoch, its latitude rows.
std::vector<std::int64_t> batch_ids(const DataParallelCoords& coords, int step) {
  dp::DistributedSampler sampler(kDataset, coords, sampler_options());
  sampler.set_epoch(step);
  return sampler.batch(0, kBatch);
}

}  // namespace

TEST(DataParallelTraining, DdpAndFsdp2TrackSerialOverlapOnAndOffIdentical) {
  for (const ParallelismConfig& config : layouts()) {
    Mesh mesh(MPI_COMM_WORLD, config);
    const int P = mesh.dp_size();
    const std::string where = layout_name(mesh);

    // Serial reference: the union of the dp batches, the loss normalised over it.
    const SerialRun serial = train_serial(P, kSteps, [&](int r, int step) { return batch_ids({r, P}, step); });
    FieldNet snapshot(nullptr);  // holds the serial values of one step for comparisons

    struct Variant {
      DataParallelMode mode;
      bool overlap;
    };
    const Variant variants[] = {{DataParallelMode::ddp, true}, {DataParallelMode::ddp, false},
                                {DataParallelMode::fsdp2, true}, {DataParallelMode::fsdp2, false}};
    std::vector<std::vector<Tensor>> finals;
    for (const Variant& v : variants) {
      const std::string what = where + " " + std::string(data_parallel_mode_name(v.mode)) +
                               (v.overlap ? " overlap" : " no overlap");
      // Small buckets, so ddp runs several of them.
      ParallelRun run = make_parallel(mesh, v.mode, v.overlap, /*bucket_bytes=*/160);
      FieldNet& model = *run.model;
      if (v.mode == DataParallelMode::fsdp2) {
        EXPECT_EQ(model.at("mlp.mlp.0").type_name(), "FSDP(ColumnParallelConv2d)") << what;
      }
      // Expected dp collectives per step: ddp one all-reduce per bucket; fsdp2 per unit
      // with sharded parameters an all-gather forward, an all-gather and a reduce-scatter
      // backward, plus the buckets of parameters too small to shard.
      std::int64_t expected_collectives = static_cast<std::int64_t>(run.data_parallel->buckets().size());
      if (v.mode == DataParallelMode::ddp) {
        EXPECT_GE(run.data_parallel->buckets().size(), 2u) << what;
      } else {
        expected_collectives += 3 * sharded_units(*run.data_parallel);
        EXPECT_EQ(run.data_parallel->unit_paths(), (std::vector<std::string>{"conv", "mlp.mlp.0", "mlp.mlp.2", "head"}))
            << what;
      }
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<std::int64_t> ids = batch_ids(mesh.data_parallel_coords(), step);
        const Tensor x = local_rows(stack(ids, false), model);
        const Tensor t = local_rows(stack(ids, true), model);
        run.optimizer->zero_grad();
        const std::int64_t c0 = mesh.dp().stats().collectives;
        const Tensor y = model.forward(x);
        model.backward(mse_grad(y, t, static_cast<double>(kBatch * kOutC * kLat * kLon)));
        run.data_parallel->finish_gradient_sync();
        const std::int64_t c1 = mesh.dp().stats().collectives;
        tp::sync_replicated_gradients(model, mesh.tp());
        domain::sync_domain_gradients(model, mesh);
        run.optimizer->step();
        if (step == 0) {
          EXPECT_EQ(c1 - c0, expected_collectives) << what;
          // This rank's output: its dp rows of the serial batch, its latitude rows.
          const Tensor want = local_rows(serial.outputs[0].narrow(0, mesh.coords().dp * kBatch, kBatch), model);
          EXPECT_TRUE(tensors_close(y, want)) << what << ": output";
        }
        auto sp = snapshot.parameters();
        for (std::size_t i = 0; i < sp.size(); ++i) sp[i]->value = serial.values[step][i];
        expect_tracks_serial(snapshot, model, what + " after step " + std::to_string(step));
      }
      // Placements: fsdp2 shards over dp on top of tp; ddp keeps dp Replicate.
      for (auto& [name, p] : model.named_parameters()) {
        const bool sharded = v.mode == DataParallelMode::fsdp2 && p->value.dim() > 0 &&
                             (p->placement.tp.is_shard() && p->placement.tp.dim == 0 ? p->global_shape[0] / mesh.tp_size()
                                                                                     : p->global_shape[0]) >= P;
        EXPECT_EQ(p->placement.dp.is_shard(), sharded) << what << ": " << name << " " << p->placement.str();
      }
      finals.emplace_back();
      for (Parameter* p : model.parameters()) finals.back().push_back(p->value.clone());
    }
    // Overlap on and off: bit-identical (same buckets, same reductions, same order).
    for (std::size_t k : {0u, 2u}) {
      for (std::size_t i = 0; i < finals[k].size(); ++i) {
        EXPECT_TRUE(bitwise_equal(finals[k][i], finals[k + 1][i])) << where << " variant " << k << " parameter " << i;
      }
    }
  }
}

TEST(DataParallelMemory, Fsdp2ParameterAndOptimizerMemoryIsAboutOneOverDp) {
  for (const ParallelismConfig& config : layouts()) {
    Mesh mesh(MPI_COMM_WORLD, config);
    const int P = mesh.dp_size();
    const std::string where = layout_name(mesh);
    ParallelRun ddp = make_parallel(mesh, DataParallelMode::ddp, true, std::size_t(1) << 20);
    ParallelRun fsdp = make_parallel(mesh, DataParallelMode::fsdp2, true, std::size_t(1) << 20);
    const dp::MemoryReport d = ddp.data_parallel->memory_report(ddp.optimizer.get());
    const dp::MemoryReport f = fsdp.data_parallel->memory_report(fsdp.optimizer.get());

    // The same numbers from the shapes alone, without allocating (the driver's dry run).
    FieldNet unconverted(&mesh);
    tp::apply_tensor_parallel(unconverted, mesh.tp());
    dp::MemoryPlanLayout layout = dp::MemoryPlanLayout::of(mesh);
    layout.mode = DataParallelMode::ddp;
    EXPECT_EQ(dp::plan_memory(unconverted, layout, dp::OptimizerKind::adamw), d) << where;
    layout.mode = DataParallelMode::fsdp2;
    EXPECT_EQ(dp::plan_memory(unconverted, layout, dp::OptimizerKind::adamw), f) << where;

    // The tolerance from the shapes: shard_range gives a rank at most one row more than
    // 1/dp of a parameter, and a parameter with fewer rows than dp ranks stays whole.
    double slack = 0, exact_ddp = 0;
    for (auto& [name, p] : unconverted.named_parameters()) {
      const double bytes = 3.0 * static_cast<double>(p->value.nbytes());  // value + AdamW m, v
      exact_ddp += bytes;
      const std::int64_t rows = p->value.dim() > 0 ? p->value.size(0) : 0;
      if (rows >= P) {
        slack += bytes / static_cast<double>(rows);  // one row
      } else {
        slack += bytes * (1.0 - 1.0 / P);  // kept whole
      }
    }
    const double ddp_bytes = static_cast<double>(d.parameter_bytes + d.optimizer_bytes);
    const double fsdp_bytes = static_cast<double>(f.parameter_bytes + f.optimizer_bytes);
    EXPECT_EQ(ddp_bytes, exact_ddp) << where;
    EXPECT_LE(fsdp_bytes, ddp_bytes / P + slack) << where;
    EXPECT_GE(fsdp_bytes, ddp_bytes / P - slack) << where;
    EXPECT_LT(fsdp_bytes, ddp_bytes) << where;
    EXPECT_EQ(f.gradient_bytes, f.parameter_bytes) << where;
    EXPECT_GT(f.transient_bytes, 0) << where;
    EXPECT_EQ(d.transient_bytes, 0) << where;
    const std::string text = dp::format_memory_report(f, "fsdp2 " + where);
    EXPECT_NE(text.find("optimizer state"), std::string::npos) << text;
    EXPECT_NE(text.find(dp::format_bytes(f.total_bytes())), std::string::npos) << text;
  }
}

TEST(DataParallelErrors, RootOwningParametersAndDoubleApplicationAreNamed) {
  Mesh mesh(MPI_COMM_WORLD, layouts().front());
  if (mesh.dp_size() == 1) GTEST_SKIP() << "needs dp > 1";
  nn::Conv2d root(2, 2, 1, 1);
  try {
    dp::DataParallel bad(root, mesh, DataParallelMode::fsdp2);
    ADD_FAILURE() << "a root that owns parameters must be rejected";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
  }
  ParallelRun run = make_parallel(mesh, DataParallelMode::fsdp2, true, 1024);
  try {
    dp::DataParallel twice(*run.model, mesh, DataParallelMode::ddp, {.overlap = false});
    ADD_FAILURE() << "applying data parallelism twice must be rejected";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("already sharded over dp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dp::DataParallel(*run.model, mesh, DataParallelMode::ddp, {.bucket_bytes = 0}), InvalidArgument);
}
