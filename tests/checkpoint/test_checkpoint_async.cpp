// Asynchronous saves (io/async_checkpoint.hpp): the files are the synchronous save's
// (the same files and sizes; the same header, datasets, checksums and values, byte for
// byte; HDF5's per-object timestamps aside); the snapshot is
// what the step held, whatever training does during the write; training resumed from an
// asynchronous checkpoint equals training that never stopped; one save in flight; the
// fault-injection hooks on the background path leave `latest` and the previous step
// intact. Runs at 1, 2 and 4 ranks under MPI_THREAD_MULTIPLE
// (TESSERA_TEST_MPI_THREAD_MULTIPLE=1); the refusal below it runs at 1 rank without.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ckpt_test_util.hpp"
#include "tessera/io/async_checkpoint.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"

using namespace tessera;
using namespace tessera::testing;
namespace fs = std::filesystem;

namespace {

const io::CheckpointLayout kLayouts[] = {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared};

bool thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

class AsyncCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!thread_multiple()) GTEST_SKIP() << "needs TESSERA_TEST_MPI_THREAD_MULTIPLE=1";
    const int n = world_size();
    mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, n == 4 ? config(DataParallelMode::ddp, 2)
                                                         : config(DataParallelMode::none, n));
  }
  std::unique_ptr<Mesh> mesh;
};

io::SaveOptions save_options(io::CheckpointLayout layout, std::int64_t step) {
  io::SaveOptions o;
  o.layout = layout;
  o.step = step;
  o.metadata = "model:\n  hidden: 16\n";
  return o;
}

// Rank 0: the two step directories hold the same files, of the same sizes, and the same
// checkpoint: the same header (metadata, step, layout, optimizer, writer ranks) and
// every dataset with the same shape, dtype, placement, checksum attribute and bytes. Not
// the same file bytes: HDF5 stamps each object header with the second it was written
// (object time tracking, on by default), so two synchronous saves a second apart differ
// in those bytes too (one byte per object, by one); within one second they were
// identical here, MANIFEST included.
void expect_identical_directories(const std::string& a, const std::string& b) {
  if (world_rank() != 0) return;
  std::vector<std::pair<std::string, std::uintmax_t>> files_a, files_b;
  for (const auto& e : fs::directory_iterator(a)) files_a.emplace_back(e.path().filename().string(), e.file_size());
  for (const auto& e : fs::directory_iterator(b)) files_b.emplace_back(e.path().filename().string(), e.file_size());
  std::sort(files_a.begin(), files_a.end());
  std::sort(files_b.begin(), files_b.end());
  EXPECT_EQ(files_a, files_b);
  const io::CheckpointReader ra(a), rb(b);
  EXPECT_EQ(ra.header().metadata, rb.header().metadata);
  EXPECT_EQ(ra.header().step, rb.header().step);
  EXPECT_EQ(ra.header().layout, rb.header().layout);
  EXPECT_EQ(ra.header().world_size, rb.header().world_size);
  EXPECT_EQ(ra.header().writer_ranks, rb.header().writer_ranks);
  EXPECT_EQ(ra.header().optimizer_type, rb.header().optimizer_type);
  EXPECT_EQ(ra.header().optimizer_step_count, rb.header().optimizer_step_count);
  ASSERT_EQ(ra.datasets().size(), rb.datasets().size());
  for (std::size_t i = 0; i < ra.datasets().size(); ++i) {
    const io::DatasetInfo &da = ra.datasets()[i], &db = rb.datasets()[i];
    EXPECT_EQ(da.path, db.path);
    EXPECT_EQ(da.shape, db.shape) << da.path;
    EXPECT_EQ(da.dtype, db.dtype) << da.path;
    EXPECT_EQ(da.placement, db.placement) << da.path;
    EXPECT_EQ(da.checksum, db.checksum) << da.path;
    EXPECT_TRUE(same_bytes(ra.read(da), rb.read(db))) << da.path;
  }
  EXPECT_TRUE(io::verify_checkpoint(b).ok());
}

void expect_same_values(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(same_bytes(pa[i].second->value, pb[i].second->value)) << pa[i].first << " on rank " << world_rank();
  }
}

// Every rank threw, and the same message everywhere.
template <class E, class F>
std::string same_error_everywhere(F&& f) {
  std::string message = "(no exception)";
  try {
    f();
  } catch (const E& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("(wrong type) ") + e.what();
  }
  const auto all = all_gather_strings(message);
  for (const auto& m : all) EXPECT_EQ(m, all[0]);
  return message;
}

}  // namespace

// Both layouts, with AdamW state (f32) and, without an optimizer, with a bf16 tensor.
TEST_F(AsyncCheckpoint, TheCheckpointIsTheSynchronousSaves) {
  for (auto layout : kLayouts) {
    for (const bool bf16 : {false, true}) {
      const std::string name = std::string(io::checkpoint_layout_name(layout)) + (bf16 ? "_bf16" : "_adamw");
      const std::string sync_root = scratch_dir("identical_sync_" + name), async_root = scratch_dir("identical_async_" + name);
      auto model = make_model(mesh->tp(), 21, /*with_bf16=*/bf16);
      std::unique_ptr<AdamW> adam;
      if (!bf16) {
        adam = std::make_unique<AdamW>(model->named_parameters(), AdamWOptions{});
        train(*model, *adam, 2);
      }
      const std::string sync_dir = io::save_checkpoint(sync_root, *mesh, *model, adam.get(), save_options(layout, 7));
      io::AsyncCheckpointer saver(*mesh);
      const io::AsyncSaveStarted started = saver.save(async_root, *model, adam.get(), save_options(layout, 7));
      EXPECT_EQ(started.directory, (fs::path(async_root) / "step_00000007").string());
      EXPECT_EQ(started.waited_seconds, 0.0);
      EXPECT_GT(started.snapshot_bytes, 0u);
      EXPECT_TRUE(saver.in_flight());
      EXPECT_EQ(saver.wait(), started.directory);
      EXPECT_FALSE(saver.in_flight());
      EXPECT_EQ(io::latest_checkpoint(async_root), started.directory);
      expect_identical_directories(sync_dir, started.directory);
    }
  }
}

// The writer saves the snapshot, not the tensors: training that changes every weight
// and the optimizer's state while the write runs changes nothing in the file.
TEST_F(AsyncCheckpoint, TrainingDuringTheWriteDoesNotReachTheFile) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir("isolation_" + std::string(io::checkpoint_layout_name(layout)));
    auto model = make_model(mesh->tp(), 5);
    AdamW adam(model->named_parameters(), {});
    train(*model, adam, 2);
    auto at_save = make_model(mesh->tp(), 5);
    AdamW adam_at_save(at_save->named_parameters(), {});
    train(*at_save, adam_at_save, 2);  // the same state, kept aside
    io::AsyncCheckpointer saver(*mesh);
    saver.save(root, *model, &adam, save_options(layout, 2));
    train(*model, adam, 3);  // while the writer may still be writing
    saver.wait();
    auto loaded = make_model(mesh->tp(), 77);
    AdamW adam_loaded(loaded->named_parameters(), {});
    io::load_checkpoint(root, *mesh, *loaded, &adam_loaded);
    expect_same_values(*loaded, *at_save);
    EXPECT_EQ(adam_loaded.step_count(), 2);
    auto s1 = adam_at_save.named_state(), s2 = adam_loaded.named_state();
    ASSERT_EQ(s1.size(), s2.size());
    for (std::size_t i = 0; i < s1.size(); ++i) EXPECT_TRUE(same_bytes(s1[i].tensor, s2[i].tensor)) << s1[i].name;
  }
}

// Training on from an asynchronous checkpoint gives, bit for bit, what training on
// without stopping gives.
TEST_F(AsyncCheckpoint, ResumeEqualsUninterruptedTraining) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir("resume_" + std::string(io::checkpoint_layout_name(layout)));
    auto model = make_model(mesh->tp(), 9);
    AdamW adam(model->named_parameters(), {});
    train(*model, adam, 3);
    io::AsyncCheckpointer saver(*mesh);
    saver.save(root, *model, &adam, save_options(layout, 3));
    train(*model, adam, 4);
    saver.wait();

    auto resumed = make_model(mesh->tp(), 123);
    AdamW adam_resumed(resumed->named_parameters(), {});
    io::load_checkpoint(root, *mesh, *resumed, &adam_resumed);
    ASSERT_EQ(adam_resumed.step_count(), 3);
    // train() draws step s's gradients from s: continue the schedule at step 3.
    for (int s = 3; s < 7; ++s) {
      set_layout_free_grads(*resumed, static_cast<std::uint64_t>(s - 3));
      adam_resumed.step();
    }
    // The uninterrupted model's steps 3..6 used the gradients of s = 0..3 (train's loop
    // restarts its count): the same draws.
    expect_same_values(*resumed, *model);
  }
}

// One save in flight: the next save waits for it (and says so), both commit, `latest`
// names the newer one.
TEST_F(AsyncCheckpoint, TheNextSaveWaitsForThePreviousOne) {
  const std::string root = scratch_dir("in_flight");
  auto model = make_model(mesh->tp(), 4);
  std::vector<std::string> finished;  // rank-local, from the writer thread
  io::AsyncCheckpointer saver(*mesh, [&](const io::AsyncSaveFinished& f) {
    EXPECT_GE(f.write_seconds, 0.0);
    finished.push_back(f.directory);
  });
  const auto first = saver.save(root, *model, nullptr, save_options(io::CheckpointLayout::per_rank, 10));
  const auto second = saver.save(root, *model, nullptr, save_options(io::CheckpointLayout::per_rank, 20));
  EXPECT_EQ(second.previous, first.directory);
  EXPECT_GE(second.waited_seconds, 0.0);
  EXPECT_EQ(saver.wait(), second.directory);
  EXPECT_EQ(saver.wait(), "");  // nothing in flight
  EXPECT_EQ(finished, (std::vector<std::string>{first.directory, second.directory}));
  EXPECT_EQ(io::list_checkpoints(root), (std::vector<std::string>{first.directory, second.directory}));
  EXPECT_EQ(io::latest_checkpoint(root), second.directory);
}

// The fault-injection hooks on the background path: every stage x every rank as the one
// that fails. `prepare` fails in save() (before the snapshot is handed over); the others
// in the writer, and the next wait() throws the same error on every rank. `latest` and
// the previous step stay, nothing else is left, and the saver takes the next save.
TEST_F(AsyncCheckpoint, InjectedFailuresInTheWriterLeaveLatestIntact) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir("inject_" + std::string(io::checkpoint_layout_name(layout)));
    auto first = make_model(mesh->tp(), 1);
    io::AsyncCheckpointer saver(*mesh);
    saver.save(root, *first, nullptr, save_options(layout, 1));
    const std::string committed = saver.wait();
    auto second = make_model(mesh->tp(), 2);
    for (int victim = 0; victim < world_size(); ++victim) {
      for (const char* stage : {"prepare", "write", "index", "commit"}) {
        const std::string hook = std::to_string(victim) + ":" + stage;
        setenv("TESSERA_CKPT_FAIL", hook.c_str(), 1);
        const auto message = same_error_everywhere<IoError>([&] {
          saver.save(root, *second, nullptr, save_options(layout, 2));
          saver.wait();
        });
        unsetenv("TESSERA_CKPT_FAIL");
        EXPECT_NE(message.find("injected failure (TESSERA_CKPT_FAIL=" + hook + ")"), std::string::npos) << message;
        EXPECT_FALSE(saver.in_flight());
        if (world_rank() == 0) {
          EXPECT_EQ(io::list_checkpoints(root), std::vector<std::string>{committed}) << stage;
          EXPECT_EQ(io::latest_checkpoint(root), committed) << stage;
          std::size_t entries = 0;
          for (const auto& e : fs::directory_iterator(root)) entries += e.path().filename() != "latest";
          EXPECT_EQ(entries, 1u) << "temporary files left behind after a failure at " << stage;
        }
      }
    }
    auto model = make_model(mesh->tp(), 3);
    io::load_checkpoint(root, *mesh, *model);
    expect_same_values(*model, *first);
    // The saver still works after the failures.
    saver.save(root, *second, nullptr, save_options(layout, 3));
    EXPECT_EQ(saver.wait(), (fs::path(root) / "step_00000003").string());
  }
}

// Below MPI_THREAD_MULTIPLE the saver refuses to start, on every rank, naming the level:
// never a silent synchronous save. (Registered without TESSERA_TEST_MPI_THREAD_MULTIPLE.)
TEST(AsyncCheckpointThreadLevel, BelowThreadMultipleIsAConfigErrorNamingTheLevel) {
  if (thread_multiple()) GTEST_SKIP() << "runs without TESSERA_TEST_MPI_THREAD_MULTIPLE";
  Mesh mesh(MPI_COMM_WORLD, config(DataParallelMode::none, world_size()));
  const auto message = same_error_everywhere<ConfigError>([&] { io::AsyncCheckpointer saver(mesh); });
  EXPECT_NE(message.find("need MPI initialised with MPI_THREAD_MULTIPLE"), std::string::npos) << message;
  EXPECT_NE(message.find("this process runs at MPI_THREAD_FUNNELED"), std::string::npos) << message;
}
