// Gradient accumulation under ddp and fsdp2 (DataParallel::set_gradient_sync): N
// micro-batches per optimizer step train like one N-times-larger batch, and the dp
// reduction happens once per optimizer step, not once per micro-batch.
//
// At 1 rank: dp 1 (DataParallel does nothing); at 2 ranks: dp 2; at 4 ranks: dp 2 x tp 2
// and dp 2 x domain 2. Each dp mode with overlap on and off: three AdamW steps of
// kMicro micro-batches, every local parameter block within relative 1e-5 of the serial
// model trained on the union of the big batches after every step; mesh.dp()'s collective
// counter: no reduction during the first kMicro - 1 backward passes (fsdp2 only gathers
// its units there), the step's reductions exactly once; with overlap they all start
// during the last backward, also after an evaluation forward (finish_evaluation).

#include <gtest/gtest.h>

#include <algorithm>

#include "dp_test_util.hpp"
#include "mpi_test.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr int kSteps = 3;
constexpr std::int64_t kMicro = 3;     // micro-batches per optimizer step (not a power of 2)
constexpr std::int64_t kDataset = 24;  // enough for dp 2 x kMicro x kBatch without padding

std::vector<ParallelismConfig> layouts() {
  if (world_size() == 4) return {{DataParallelMode::ddp, 2, 1}, {DataParallelMode::ddp, 1, 2}};
  if (world_size() == 2) return {{DataParallelMode::ddp, 1, 1}};
  return {{DataParallelMode::ddp, 1, 1}};
}

// This rank's samples of `step`: batch `index` of `size` of its dp share of the epoch.
std::vector<std::int64_t> batch_ids(const DataParallelCoords& coords, int step, std::int64_t index,
                                    std::int64_t size) {
  dp::DistributedSampler sampler(kDataset, coords, {.shuffle = true, .seed = 23, .drop_last = false});
  sampler.set_epoch(step);
  return sampler.batch(index, size);
}

// The dp collectives expected per step: ddp one all-reduce per bucket; fsdp2 per unit with
// sharded parameters an all-gather in every forward and every backward and one
// reduce-scatter, plus the buckets of the parameters too small to shard.
struct Expected {
  std::int64_t gathers_per_micro = 0;  // all-gathers of one forward + backward
  std::int64_t reductions = 0;         // reduce-scatters and all-reduces of one step
};

Expected expected_counts(const dp::DataParallel& data_parallel) {
  Expected e;
  e.reductions = static_cast<std::int64_t>(data_parallel.buckets().size());
  if (data_parallel.mode() != DataParallelMode::fsdp2) return e;
  const std::int64_t units = sharded_units(data_parallel);
  e.gathers_per_micro = 2 * units;
  e.reductions += units;
  return e;
}

}  // namespace

TEST(GradientAccumulation, MicroBatchesEqualOneBigBatchWithOneReductionPerStep) {
  for (const ParallelismConfig& config : layouts()) {
    Mesh mesh(MPI_COMM_WORLD, config);
    const int P = mesh.dp_size();
    const std::string where = layout_name(mesh);

    // Serial reference: one step on the union of every dp rank's big batch (kMicro x kBatch
    // samples per rank), the loss normalised over it.
    const std::vector<std::vector<Tensor>> serial_values =
        train_serial(P, kSteps, [&](int r, int step) { return batch_ids({r, P}, step, 0, kMicro * kBatch); }).values;
    FieldNet snapshot(nullptr);

    struct Variant {
      DataParallelMode mode;
      bool overlap;
    };
    for (const Variant v : {Variant{DataParallelMode::ddp, true}, Variant{DataParallelMode::ddp, false},
                            Variant{DataParallelMode::fsdp2, true}, Variant{DataParallelMode::fsdp2, false}}) {
      const std::string what = where + " " + std::string(data_parallel_mode_name(v.mode)) +
                               (v.overlap ? " overlap" : " no overlap");
      FieldNet model(&mesh);
      nn::initialize_parameters(model, kSeed);
      tp::apply_tensor_parallel(model, mesh.tp());
      // Small buckets, so ddp runs several of them.
      dp::DataParallel data_parallel(model, mesh, v.mode, {.bucket_bytes = 160, .overlap = v.overlap});
      AdamW optimizer(model.named_parameters(), {.lr = 1e-2});
      const Expected expected = expected_counts(data_parallel);
      if (P > 1) {
        EXPECT_GE(expected.reductions, 2) << what;
      } else {
        EXPECT_EQ(expected.reductions, 0) << what;  // nothing to reduce over one replica
      }
      const Communicator& dp_comm = mesh.dp();

      for (int step = 0; step < kSteps; ++step) {
        optimizer.zero_grad();
        const std::int64_t step_start = dp_comm.stats().collectives;
        std::int64_t before_last = 0;
        for (std::int64_t k = 0; k < kMicro; ++k) {
          const std::vector<std::int64_t> ids = batch_ids(mesh.data_parallel_coords(), step, k, kBatch);
          const Tensor x = local_rows(stack(ids, false), model);
          const Tensor t = local_rows(stack(ids, true), model);
          const bool last = k + 1 == kMicro;
          data_parallel.set_gradient_sync(last);
          if (last) before_last = dp_comm.stats().collectives;
          const std::int64_t c0 = dp_comm.stats().collectives;
          const Tensor y = model.forward(x);
          // Normalised over the rank's whole big batch: the micro-batch gradients add up to it.
          model.backward(mse_grad(y, t, static_cast<double>(kMicro * kBatch * kOutC * kLat * kLon)));
          if (!last) {
            EXPECT_EQ(dp_comm.stats().collectives - c0, expected.gathers_per_micro)
                << what << " step " << step << " micro-batch " << k << ": a reduction before the last backward";
          }
        }
        const std::int64_t before_finish = dp_comm.stats().collectives;
        data_parallel.finish_gradient_sync();
        const std::int64_t step_end = dp_comm.stats().collectives;
        EXPECT_EQ(step_end - step_start, kMicro * expected.gathers_per_micro + expected.reductions)
            << what << " step " << step << ": the step's dp collectives";
        // The last backward: its gathers, and with overlap every reduction; without overlap
        // fsdp2 still reduce-scatters its units there (blocking) and leaves the buckets of
        // its unsharded parameters, like ddp's, to finish_gradient_sync().
        const std::int64_t buckets = static_cast<std::int64_t>(data_parallel.buckets().size());
        const std::int64_t in_last_backward =
            v.overlap ? expected.reductions : (v.mode == DataParallelMode::fsdp2 ? expected.reductions - buckets : 0);
        EXPECT_EQ(before_finish - before_last, expected.gathers_per_micro + in_last_backward)
            << what << " step " << step << ": reductions started by the last backward";
        tp::sync_replicated_gradients(model, mesh.tp());
        domain::sync_domain_gradients(model, mesh);
        optimizer.step();

        auto sp = snapshot.parameters();
        for (std::size_t i = 0; i < sp.size(); ++i) sp[i]->value = serial_values[step][i];
        expect_tracks_serial(snapshot, model, what + " after step " + std::to_string(step));

        // An evaluation forward between steps: the next step still reduces once, on time.
        const std::vector<std::int64_t> ids = batch_ids(mesh.data_parallel_coords(), step, 0, kBatch);
        (void)model.forward(local_rows(stack(ids, false), model));
        data_parallel.finish_evaluation();
      }
      data_parallel.set_gradient_sync(true);
      EXPECT_TRUE(data_parallel.gradient_sync()) << what;
    }
  }
}

TEST(GradientAccumulation, AccumulatedEqualsBigBatchOnTheSameLayout) {
  // The same comparison without the serial detour, parameter by parameter: a big batch
  // of kMicro x kBatch per rank against kMicro micro-batches, ddp and fsdp2 (overlap).
  for (const ParallelismConfig& config : layouts()) {
    Mesh mesh(MPI_COMM_WORLD, config);
    const std::string where = layout_name(mesh);
    for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
      const std::string what = where + " " + std::string(data_parallel_mode_name(mode));
      std::vector<std::vector<Tensor>> finals;
      for (bool accumulate : {false, true}) {
        FieldNet model(&mesh);
        nn::initialize_parameters(model, kSeed);
        tp::apply_tensor_parallel(model, mesh.tp());
        dp::DataParallel data_parallel(model, mesh, mode, {.bucket_bytes = 160});
        AdamW optimizer(model.named_parameters(), {.lr = 1e-2});
        const double n = static_cast<double>(kMicro * kBatch * kOutC * kLat * kLon);
        for (int step = 0; step < kSteps; ++step) {
          optimizer.zero_grad();
          if (accumulate) {
            for (std::int64_t k = 0; k < kMicro; ++k) {
              const auto ids = batch_ids(mesh.data_parallel_coords(), step, k, kBatch);
              data_parallel.set_gradient_sync(k + 1 == kMicro);
              const Tensor y = model.forward(local_rows(stack(ids, false), model));
              model.backward(mse_grad(y, local_rows(stack(ids, true), model), n));
            }
          } else {
            const auto ids = batch_ids(mesh.data_parallel_coords(), step, 0, kMicro * kBatch);
            const Tensor y = model.forward(local_rows(stack(ids, false), model));
            model.backward(mse_grad(y, local_rows(stack(ids, true), model), n));
          }
          data_parallel.finish_gradient_sync();
          tp::sync_replicated_gradients(model, mesh.tp());
          domain::sync_domain_gradients(model, mesh);
          optimizer.step();
        }
        finals.emplace_back();
        for (Parameter* p : model.parameters()) finals.back().push_back(p->value.clone());
      }
      ASSERT_EQ(finals[0].size(), finals[1].size()) << what;
      for (std::size_t i = 0; i < finals[0].size(); ++i) {
        EXPECT_TRUE(tensors_close(finals[1][i], finals[0][i], 1e-5)) << what << " parameter " << i;
      }
    }
  }
}
