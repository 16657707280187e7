// Checkpoints across pipeline sizes: each stage writes its own parameters (and AdamW
// state); the checkpoint loads at any pipeline x tp x dp layout, serially included, and
// every rank ends with exactly the block of the saved master weights and optimizer state
// that it holds, byte for byte.
//
// At 2 ranks: trained at pipeline 2, saved (per_rank and shared), loaded serially (one
// mesh per rank over MPI_COMM_SELF), at pipeline 2 with another split and at tp 2
// without a pipeline; the serial copy is saved again and loaded back at pipeline 2.
// At 4 ranks: trained at pipeline 2 x tp 2, loaded serially, at pipeline 4, at pipeline 2
// x dp 2 (ddp) and at tp 2 x dp 2; the serial copy loaded back at pipeline 4.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "mpi_test.hpp"
#include "pp_test_util.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr std::int64_t kBatch = 8;
constexpr std::uint64_t kSeed = 5151;

struct Layout {
  ParallelismConfig config;
  pp::PipelineOptions split;
  std::string name;
};

// A model, its pipeline and optimizer at `layout` over `comm` (initialised from `seed`).
struct Replica {
  Mesh mesh;
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<pp::Pipeline> pipeline;
  std::unique_ptr<dp::DataParallel> ddp;
  std::unique_ptr<AdamW> optimizer;

  Replica(MPI_Comm comm, const Layout& layout, std::uint64_t seed) : mesh(comm, layout.config) {
    model = make_blocks_model();
    if (mesh.tp_size() > 1) tp::parallelize(*model, mesh, blocks_tp_plan());
    pipeline = std::make_unique<pp::Pipeline>(*model, mesh, layout.split);
    nn::initialize_parameters(*model, seed);
    if (mesh.dp_size() > 1) {
      ddp = std::make_unique<dp::DataParallel>(*model, mesh, dp::DataParallelOptions{.overlap = false});
    }
    optimizer = std::make_unique<AdamW>(model->named_parameters(), AdamWOptions{.lr = 1e-2});
  }

  void train(int steps) {
    const std::int64_t rows = kBatch / mesh.dp_size(), first = rows * mesh.coords().dp;
    for (int step = 0; step < steps; ++step) {
      const Tensor x = random_tensor({kBatch, kWidth}, 300 + static_cast<std::uint64_t>(step)).narrow(0, first, rows);
      const Tensor t = random_tensor({kBatch, kOut}, 400 + static_cast<std::uint64_t>(step)).narrow(0, first, rows);
      const Tensor local_t = t.contiguous();
      optimizer->zero_grad();
      pipeline->train_step(pipeline->is_first() ? x.contiguous() : Tensor(),
                           [&](const Tensor& out, const pp::Microbatch& mb, Tensor& grad) {
                             return mse_share(out, local_t, mb, grad);
                           });
      if (ddp) ddp->finish_gradient_sync();
      if (mesh.tp_size() > 1) tp::sync_replicated_gradients(*model, mesh.tp());
      optimizer->step();
    }
  }
};

Layout serial_layout() { return {{DataParallelMode::none, 1, 1, 1}, {}, "serial"}; }

pp::PipelineOptions counts(std::vector<int> units) {
  pp::PipelineOptions o;
  o.units_per_stage = std::move(units);
  o.schedule = pp::Schedule::one_f_one_b;
  o.microbatches = 3;
  return o;
}

pp::PipelineOptions cut_at(std::vector<std::string> cuts) {
  pp::PipelineOptions o;
  o.cut_points = std::move(cuts);
  o.schedule = pp::Schedule::gpipe;
  o.microbatches = 2;
  return o;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.contiguous(), hb = b.contiguous();
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

// Every parameter and optimizer state `r` holds is byte for byte its block of the
// serial `master`'s; the optimizer's step count is the master's.
void expect_blocks_of(Replica& master, Replica& r, const std::string& where) {
  std::map<std::string, Parameter*> want;
  for (const auto& [name, p] : master.model->named_parameters()) want[name] = p;
  for (const auto& [name, p] : r.model->named_parameters()) {
    ASSERT_TRUE(want.count(name)) << where << ": " << name;
    EXPECT_TRUE(same_bytes(p->value, master_block(want[name]->value, p->local_offset, p->value.shape())))
        << where << ": " << name << " on rank " << world_rank();
  }
  std::map<std::string, OptimizerState> want_state;
  for (const OptimizerState& s : master.optimizer->named_state()) want_state.emplace(s.name, s);
  const auto states = r.optimizer->named_state();
  EXPECT_FALSE(states.empty());
  for (const OptimizerState& s : states) {
    ASSERT_TRUE(want_state.count(s.name)) << where << ": " << s.name;
    EXPECT_TRUE(same_bytes(s.tensor, master_block(want_state.at(s.name).tensor, s.local_offset, s.tensor.shape())))
        << where << ": optimizer state " << s.name << " on rank " << world_rank();
  }
  EXPECT_EQ(r.optimizer->step_count(), master.optimizer->step_count()) << where;
}

// Loads `root` into a fresh replica at `layout` (other initial values) and checks it.
void load_and_check(const std::string& root, const Layout& layout, Replica& master, const std::string& where) {
  Replica r(MPI_COMM_WORLD, layout, kSeed + 99);
  const io::LoadResult result = io::load_checkpoint(root, r.mesh, *r.model, r.optimizer.get());
  EXPECT_EQ(result.unexpected.size(), 0u);
  expect_blocks_of(master, r, where + " -> " + layout.name);
}

void round_trip(const Layout& trained_at, const std::vector<Layout>& load_at, const Layout& back_at) {
  for (auto format : {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared}) {
    const std::string fmt(io::checkpoint_layout_name(format));
    SCOPED_TRACE(trained_at.name + ", " + fmt);
    const std::string root = scratch_dir("trained_" + fmt);
    Replica trained(MPI_COMM_WORLD, trained_at, kSeed);
    trained.train(3);
    io::SaveOptions save;
    save.layout = format;
    save.step = 3;
    io::save_checkpoint(root, trained.mesh, *trained.model, trained.optimizer.get(), save);

    // Serially: the whole model, and it is exactly what the stages held.
    Replica master(MPI_COMM_SELF, serial_layout(), kSeed + 7);
    const io::LoadResult loaded = io::load_checkpoint(root, master.mesh, *master.model, master.optimizer.get());
    EXPECT_EQ(loaded.loaded.size(), 3 * master.model->named_parameters().size());  // value, m, v
    // The header records the layout it was written at, the pipeline included.
    EXPECT_EQ(loaded.saved_mesh.pipeline, trained_at.config.pipeline);
    EXPECT_EQ(loaded.saved_mesh.tensor, trained_at.config.tensor);
    EXPECT_EQ(io::CheckpointReader(root).header().mesh.pipeline, trained_at.config.pipeline);
    expect_blocks_of(master, trained, "saved at " + trained_at.name + " against its serial load");

    for (const Layout& layout : load_at) load_and_check(root, layout, master, trained_at.name);

    // And back: the serial copy saved by rank 0, loaded at a pipeline.
    const std::string serial_root = scratch_dir("serial_" + fmt);
    if (world_rank() == 0) io::save_checkpoint(serial_root, master.mesh, *master.model, master.optimizer.get(), save);
    Communicator(MPI_COMM_WORLD).barrier();
    load_and_check(serial_root, back_at, master, "serial");
    EXPECT_EQ(io::CheckpointReader(serial_root).header().mesh.pipeline, 1);
  }
}

TEST(PipelineCheckpoint, ReshardsAcrossPipelineSizes) {
  if (world_size() == 2) {
    const Layout pp2{{DataParallelMode::none, 1, 1, 2}, counts({4, 4}), "pipeline 2"};
    round_trip(pp2,
               {{{DataParallelMode::none, 1, 1, 2}, counts({6, 2}), "pipeline 2 (units 6, 2)"},
                {{DataParallelMode::none, 2, 1, 1}, {}, "tp 2"}},
               {{DataParallelMode::none, 1, 1, 2}, cut_at({"2"}), "pipeline 2 (cut at 2)"});
  } else if (world_size() == 4) {
    const Layout pp2tp2{{DataParallelMode::none, 2, 1, 2}, cut_at({"1"}), "pipeline 2 x tp 2"};
    round_trip(pp2tp2,
               {{{DataParallelMode::none, 1, 1, 4}, counts({2, 2, 2, 2}), "pipeline 4"},
                {{DataParallelMode::ddp, 1, 1, 2}, counts({5, 3}), "pipeline 2 x dp 2 (ddp)"},
                {{DataParallelMode::ddp, 2, 1, 1}, {}, "tp 2 x dp 2 (ddp)"}},
               {{DataParallelMode::none, 1, 1, 4}, cut_at({"0.2", "1", "1.2"}), "pipeline 4 (cuts 0.2, 1, 1.2)"});
  } else {
    FAIL() << "registered at 2 and 4 ranks";
  }
}

// A checkpoint written before the header recorded the pipeline (the format-1 fixture
// of tests/checkpoint, which has no mesh_pipeline attribute) reads as pipeline 1.
TEST(PipelineCheckpoint, OlderCheckpointsReadAsPipelineOne) {
  const std::string fixture = std::string(TESSERA_CHECKPOINT_FIXTURES) + "/format_v1/shared";
  const io::CheckpointReader reader(fixture);
  EXPECT_EQ(reader.header().format_version, 1);
  EXPECT_EQ(reader.header().mesh.pipeline, 1);
  EXPECT_EQ(reader.header().mesh.tensor, 2);
}

// A tensor held by two stages would be written twice: an error naming it, on every rank.
// Loading one is the same error: a model that is whole on every stage (not split by a
// pp::Pipeline) used to read each tensor once per stage and call the checkpoint
// corrupted (the stages' checksum shares added up to a multiple of the stored sum).
TEST(PipelineCheckpoint, TensorOnTwoStagesIsAnError) {
  Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::none, 1, 1, world_size()});
  nn::Linear shared_layer(2, 2);
  nn::initialize_parameters(shared_layer, 1);
  const std::string root = scratch_dir("two_stages");
  try {
    io::save_checkpoint(root, mesh, shared_layer);
    ADD_FAILURE() << "saving one tensor from both stages did not fail";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("/model/weight is held by pipeline stages 0 and 1"), std::string::npos)
        << e.what();
  }

  const std::string serial_root = scratch_dir("two_stages_serial");
  if (world_rank() == 0) {
    Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1, 1});
    io::save_checkpoint(serial_root, self, shared_layer);
  }
  Communicator(MPI_COMM_WORLD).barrier();
  nn::Linear whole(2, 2);
  try {
    (void)io::load_checkpoint(serial_root, mesh, whole);
    ADD_FAILURE() << "loading one tensor into both stages did not fail";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    // The first name in order: the load compares the stages' names sorted.
    EXPECT_NE(message.find("/model/bias is held by pipeline stages 0 and 1"), std::string::npos) << message;
    EXPECT_NE(message.find("pipeline 1"), std::string::npos) << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "loading one tensor into both stages: " << e.what();
  }
}

}  // namespace
