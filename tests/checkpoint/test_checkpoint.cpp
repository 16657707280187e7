// Checkpoints at one layout: bit-exact round trips (both layouts, with optimizer
// state), mismatches reported on every rank, partial and non-strict loads, corruption
// detection, injected failures, `latest` and rotation. Runs at 1, 2 and 4 ranks: the
// mesh is tp = world (1, 2) or dp 2 × tp 2 (4, replicas that must not write).

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "ckpt_test_util.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/checksum.hpp"

using namespace tessera;
using namespace tessera::testing;
namespace fs = std::filesystem;

namespace {

const io::CheckpointLayout kLayouts[] = {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared};

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const int n = world_size();
    mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, n == 4 ? config(DataParallelMode::ddp, 2)
                                                         : config(DataParallelMode::none, n));
  }
  std::unique_ptr<Mesh> mesh;
};

io::SaveOptions save_options(io::CheckpointLayout layout, std::int64_t step = 1) {
  io::SaveOptions o;
  o.layout = layout;
  o.step = step;
  o.metadata = "model:\n  hidden: 16\n";
  return o;
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

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// Flips one byte inside the stored data of `dataset` in `file` (serial HDF5 to find
// the contiguous data's file offset, then a raw write).
void flip_byte(const std::string& file, const std::string& dataset, std::size_t byte) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << dataset;
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_NE(offset, HADDR_UNDEF);
  std::FILE* raw = std::fopen(file.c_str(), "r+b");
  ASSERT_NE(raw, nullptr);
  std::fseek(raw, static_cast<long>(offset + byte), SEEK_SET);
  const int c = std::fgetc(raw);
  std::fseek(raw, static_cast<long>(offset + byte), SEEK_SET);
  std::fputc(c ^ 0x10, raw);
  std::fclose(raw);
}

}  // namespace

TEST_F(Checkpoint, RoundTripIsBitExactForBothLayouts) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("roundtrip_") + std::string(io::checkpoint_layout_name(layout)));
    auto saved = make_model(mesh->tp(), 11, /*with_bf16=*/true);
    const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(layout, 5));
    EXPECT_EQ(fs::path(dir).filename(), "step_00000005");
    EXPECT_EQ(io::latest_checkpoint(root), dir);

    auto loaded = make_model(mesh->tp(), 99, true);
    const io::LoadResult r = io::load_checkpoint(root, *mesh, *loaded);
    EXPECT_EQ(r.step, 5);
    EXPECT_EQ(r.layout, layout);
    EXPECT_EQ(r.metadata, "model:\n  hidden: 16\n");
    EXPECT_EQ(r.loaded.size(), 7u);
    EXPECT_TRUE(r.missing.empty() && r.unexpected.empty());
    auto want = saved->named_parameters();
    auto got = loaded->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(same_bytes(got[i].second->value, want[i].second->value)) << got[i].first;
    }
    // The reader presents master arrays whatever the layout.
    if (world_rank() == 0) {
      const io::CheckpointReader reader(dir);
      EXPECT_EQ(reader.header().layout, layout);
      EXPECT_EQ(reader.header().mesh.tensor, mesh->tp_size());
      const auto* w = reader.find("/model/0.weight");
      ASSERT_NE(w, nullptr);
      EXPECT_EQ(w->shape, (Shape{kHidden, kIn}));
      EXPECT_EQ(w->placement, "dp: Replicate, tp: Shard(0), domain: Replicate");
      EXPECT_TRUE(io::verify_checkpoint(dir).ok());
    }
  }
}

// Issue 46: weights that blew up (NaN, Inf) are saved with good checksums, and verify
// said "ok". Now each such dataset is a problem naming how many values are not finite
// and the first one's index; the others still pass.
TEST_F(Checkpoint, VerifyNamesEveryDatasetHoldingNaNOrInf) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("non_finite_") + std::string(io::checkpoint_layout_name(layout)));
    auto model = make_model(mesh->tp(), 5, /*with_bf16=*/true);
    auto params = model->named_parameters();
    for (auto& [name, p] : params) {
      if (name == "2.weight") {  // [4, 8], replicated: the same on every rank
        p->value.data<float>()[11] = std::numeric_limits<float>::quiet_NaN();
        p->value.data<float>()[20] = std::numeric_limits<float>::infinity();
        p->value.data<float>()[30] = std::numeric_limits<float>::quiet_NaN();
      }
      if (name == "3.weight") p->value.data<bfloat16>()[6] = bfloat16(-std::numeric_limits<float>::infinity());
    }
    const std::string dir = io::save_checkpoint(root, *mesh, *model, nullptr, save_options(layout, 3));
    if (world_rank() != 0) continue;
    const auto report = io::verify_checkpoint(dir);
    ASSERT_EQ(report.failed.size(), 2u) << ::testing::PrintToString(report.failed);
    EXPECT_EQ(report.failed[0],
              "dataset /model/2.weight: 3 of 32 values are not finite, the first (NaN) at index [1, 3]: these values "
              "cannot train or predict (load an earlier step, or fix the tensor at its source)");
    expect_contains(report.failed[1], "dataset /model/3.weight: 1 of 16 values are not finite, the first (an "
                                      "infinite value) at index [1, 2]");
    EXPECT_EQ(report.passed.size(), 5u);
    for (const auto& ok : report.passed) EXPECT_TRUE(ok != "/model/2.weight" && ok != "/model/3.weight") << ok;
  }
}

TEST_F(Checkpoint, OptimizerStateRoundTrips) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("optim_") + std::string(io::checkpoint_layout_name(layout)));
    auto model = make_model(mesh->tp(), 3);
    AdamW adam(model->named_parameters(), {});
    train(*model, adam, 3);
    io::save_checkpoint(root, *mesh, *model, &adam, save_options(layout, 3));

    auto model2 = make_model(mesh->tp(), 4);
    AdamW adam2(model2->named_parameters(), {});
    io::load_checkpoint(root, *mesh, *model2, &adam2);
    EXPECT_EQ(adam2.step_count(), 3);
    auto s1 = adam.named_state(), s2 = adam2.named_state();
    ASSERT_EQ(s1.size(), s2.size());
    for (std::size_t i = 0; i < s1.size(); ++i) EXPECT_TRUE(same_bytes(s1[i].tensor, s2[i].tensor)) << s1[i].name;
    // Training on from the loaded state matches training on from the original.
    train(*model, adam, 1);
    train(*model2, adam2, 1);
    auto p1 = model->named_parameters(), p2 = model2->named_parameters();
    for (std::size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(same_bytes(p1[i].second->value, p2[i].second->value));

    // A different optimizer type is refused, naming both.
    Sgd sgd(model2->named_parameters(), {});
    const auto message = same_error_everywhere<InvalidArgument>([&] { io::load_checkpoint(root, *mesh, *model2, &sgd); });
    expect_contains(message, "holds AdamW state, but the optimizer is Sgd");
  }
}

TEST_F(Checkpoint, MismatchesFailOnEveryRankNamingTheDataset) {
  const std::string root = scratch_dir("mismatch");
  auto saved = make_model(mesh->tp(), 1);
  io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(io::CheckpointLayout::shared));

  auto wider = make_model(mesh->tp(), 2, false, /*last_out=*/5);
  auto message = same_error_everywhere<ShapeError>([&] { io::load_checkpoint(root, *mesh, *wider); });
  expect_contains(message, "dataset /model/2.weight has shape [4, 8] but '2.weight' has global shape [5, 8]");

  auto f64 = make_model(mesh->tp(), 2, false, kOut, DType::f64);
  message = same_error_everywhere<ShapeError>([&] { io::load_checkpoint(root, *mesh, *f64); });
  expect_contains(message, "dataset /model/2.weight has dtype f32 but '2.weight' has dtype f64");

  auto extra = make_model(mesh->tp(), 2, /*with_bf16=*/true);
  message = same_error_everywhere<InvalidArgument>([&] { io::load_checkpoint(root, *mesh, *extra); });
  expect_contains(message, "has no dataset /model/3.weight for parameter '3.weight'");

  // Non-strict: the missing ones are skipped and reported, the rest loaded.
  io::LoadOptions lenient;
  lenient.strict = false;
  auto r = io::load_checkpoint(root, *mesh, *extra, nullptr, lenient);
  EXPECT_EQ(r.missing, (std::vector<std::string>{"/model/3.weight"}));
  EXPECT_EQ(r.loaded.size(), 6u);
  EXPECT_TRUE(same_bytes(extra->named_parameters()[0].second->value, saved->named_parameters()[0].second->value));

  // A model lacking tensors the file has: strict refuses, non-strict reports them.
  auto fewer = std::make_unique<nn::Sequential>();
  fewer->append(std::make_unique<tp::ColumnParallelLinear>(kIn, kHidden, mesh->tp(), false));
  message = same_error_everywhere<InvalidArgument>([&] { io::load_checkpoint(root, *mesh, *fewer); });
  expect_contains(message, "has dataset /model/1.weight, which the model does not have");
  r = io::load_checkpoint(root, *mesh, *fewer, nullptr, lenient);
  EXPECT_EQ(r.unexpected.size(), 4u);
  EXPECT_TRUE(same_bytes(fewer->named_parameters()[0].second->value, saved->named_parameters()[0].second->value));
}

TEST_F(Checkpoint, PartialLoadTouchesOnlyTheNamedParameters) {
  const std::string root = scratch_dir("partial");
  auto saved = make_model(mesh->tp(), 1);
  io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(io::CheckpointLayout::per_rank));
  auto model = make_model(mesh->tp(), 2);
  auto before = make_model(mesh->tp(), 2);
  io::LoadOptions only;
  only.only = {"1.weight", "2.bias"};
  const auto r = io::load_checkpoint(root, *mesh, *model, nullptr, only);
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"/model/1.weight", "/model/2.bias"}));
  auto p = model->named_parameters(), s = saved->named_parameters(), b = before->named_parameters();
  for (std::size_t i = 0; i < p.size(); ++i) {
    const bool named = p[i].first == "1.weight" || p[i].first == "2.bias";
    EXPECT_TRUE(same_bytes(p[i].second->value, (named ? s : b)[i].second->value)) << p[i].first;
  }
  only.only = {"9.weight"};
  const auto message = same_error_everywhere<InvalidArgument>([&] { io::load_checkpoint(root, *mesh, *model, nullptr, only); });
  expect_contains(message, "'9.weight' (in LoadOptions::only) is not a parameter of the model");
}

// Flips the lowest bit of the byte at `offset` of `file` (twice restores it).
static void toggle_bit(const std::string& file, std::int64_t offset) {
  std::FILE* raw = std::fopen(file.c_str(), "r+b");
  ASSERT_NE(raw, nullptr) << file;
  std::fseek(raw, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(raw);
  std::fseek(raw, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x01, raw);
  std::fclose(raw);
}

TEST_F(Checkpoint, CorruptedByteIsDetectedAndNamed) {
  for (auto layout : kLayouts) {
    for (bool with_manifest : {true, false}) {
      const std::string root = scratch_dir(std::string("corrupt_") + std::string(io::checkpoint_layout_name(layout)) +
                                           (with_manifest ? "_manifest" : "_v1"));
      auto saved = make_model(mesh->tp(), 1);
      const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(layout));
      // per_rank: the slice of rank 0; shared: the one file.
      const std::string name = layout == io::CheckpointLayout::per_rank ? io::rank_file_name(0) : "checkpoint.h5";
      if (world_rank() == 0) {
        ASSERT_TRUE(fs::exists(fs::path(dir) / "MANIFEST"));
        // Without the MANIFEST (a step copied as *.h5 alone) nothing is opened: the
        // step is refused, naming the command that writes one from a trusted copy.
        if (!with_manifest) fs::remove(fs::path(dir) / "MANIFEST");
        flip_byte((fs::path(dir) / name).string(), "/model/1.weight", 5);
        const auto report = io::verify_checkpoint(dir);
        EXPECT_FALSE(report.ok());
        ASSERT_FALSE(report.failed.empty());
        expect_contains(report.failed.front(), with_manifest ? "file " + name : std::string("has no MANIFEST"));
      }
      Communicator(MPI_COMM_WORLD).barrier();
      auto model = make_model(mesh->tp(), 2);
      auto fresh = make_model(mesh->tp(), 2);
      const auto message = same_error_everywhere<IoError>([&] { io::load_checkpoint(root, *mesh, *model); });
      if (with_manifest) {
        expect_contains(message, name + "' is damaged: its CRC-32C is ");
      } else {
        expect_contains(message, "has no MANIFEST");
        expect_contains(message, "tessera-ckpt manifest");
      }
      // Nothing was modified by the failed load.
      auto p = model->named_parameters(), f = fresh->named_parameters();
      for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, f[i].second->value));
    }
  }
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Every way of reading `root` refuses it with an IoError containing `part`: the load
// (on every rank, nothing modified), the serial reader in both checking modes, the
// header read that tessera-run's resume starts with, and verify.
void expect_refused_everywhere(Mesh& mesh, const std::string& root, const std::string& part) {
  auto model = make_model(mesh.tp(), 2);
  auto fresh = make_model(mesh.tp(), 2);
  expect_contains(same_error_everywhere<IoError>([&] { io::load_checkpoint(root, mesh, *model); }), part);
  auto p = model->named_parameters(), f = fresh->named_parameters();
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, f[i].second->value));
  expect_contains(same_error_everywhere<IoError>([&] { io::read_checkpoint_metadata(root, mesh.world()); }), part);
  if (world_rank() != 0) return;
  for (auto verify : {io::CheckpointReader::Verify::all_files, io::CheckpointReader::Verify::opened_file}) {
    try {
      io::CheckpointReader reader(root, verify);
      ADD_FAILURE() << "the reader opened " << root;
    } catch (const IoError& e) {
      expect_contains(e.what(), part);
    }
  }
  const auto report = io::verify_checkpoint(root);
  EXPECT_FALSE(report.ok());
  ASSERT_FALSE(report.failed.empty());
  expect_contains(report.failed.front(), part);
}

}  // namespace

// Issue 46: a step without its MANIFEST (its *.h5 copied alone) was opened by HDF5
// unchecked, and damaged HDF5 metadata crashed or hung verify, info, export and resume
// (4 KiB zeroed at offset 4096 spun forever). Such a step is refused before HDF5 sees
// it, naming `tessera-ckpt manifest`; that command lists a trusted copy's files (never
// a file that differs from a MANIFEST entry), after which it loads.
TEST_F(Checkpoint, AStepWithoutAManifestIsRefusedBeforeHdf5OpensIt) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("no_manifest_") + std::string(io::checkpoint_layout_name(layout)));
    auto saved = make_model(mesh->tp(), 1);
    const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(layout));
    const std::string index = (fs::path(dir) / "checkpoint.h5").string();
    std::string intact;
    if (world_rank() == 0) {
      intact = read_text(index);
      fs::remove(fs::path(dir) / "MANIFEST");
      std::string zeroed = intact;
      std::fill(zeroed.begin() + std::min<std::size_t>(4096, zeroed.size()),
                zeroed.begin() + std::min<std::size_t>(8192, zeroed.size()), '\0');
      write_text(index, zeroed);
    }
    Communicator(MPI_COMM_WORLD).barrier();
    expect_refused_everywhere(*mesh, root, "' has no MANIFEST, so its files cannot be checked");
    expect_refused_everywhere(*mesh, dir, "tessera-ckpt manifest '" + dir + "'");
    if (world_rank() == 0) {
      write_text(index, intact);  // the trusted copy
      const auto added = io::write_checkpoint_manifest(dir);
      // The index and one slice per writer (at 4 ranks, dp 2 x tp 2: the two dp-0 ranks).
      const std::size_t slices = world_size() == 4 ? 2 : static_cast<std::size_t>(world_size());
      EXPECT_EQ(added.size(), layout == io::CheckpointLayout::per_rank ? 1 + slices : 1u);
      EXPECT_TRUE(io::verify_checkpoint(dir).ok());
      EXPECT_TRUE(io::write_checkpoint_manifest(dir).empty());  // nothing left to add
    }
    Communicator(MPI_COMM_WORLD).barrier();
    auto model = make_model(mesh->tp(), 2);
    io::load_checkpoint(root, *mesh, *model);
    auto p = model->named_parameters(), w = saved->named_parameters();
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, w[i].second->value));
    if (world_rank() == 0) {
      // A listed file that no longer matches is never blessed.
      toggle_bit(index, 100);
      try {
        io::write_checkpoint_manifest(dir);
        ADD_FAILURE() << "a damaged file was listed as good";
      } catch (const IoError& e) {
        expect_contains(e.what(), "checkpoint.h5' is damaged");
      }
      toggle_bit(index, 100);
    }
    Communicator(MPI_COMM_WORLD).barrier();
  }
}

// Issue 46: a MANIFEST that leaves out a file of the step (the index, or a slice that the
// index's virtual datasets read) let verify pass -- and crash on a flipped byte of the
// unlisted index -- while resume refused, and a resume read an unlisted slice unchecked.
// Every reader now refuses it, naming the file.
TEST_F(Checkpoint, AManifestThatLeavesAFileOutIsAnErrorEverywhere) {
  const std::string root = scratch_dir("unlisted");
  auto saved = make_model(mesh->tp(), 1);
  const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(io::CheckpointLayout::per_rank));
  const std::string manifest = (fs::path(dir) / "MANIFEST").string();
  const std::string intact = world_rank() == 0 ? read_text(manifest) : std::string();
  for (const std::string name : {std::string("checkpoint.h5"), io::rank_file_name(0)}) {
    if (world_rank() == 0) {
      const auto at = intact.find(" " + name + "\n");
      ASSERT_NE(at, std::string::npos) << intact;
      const auto start = intact.rfind('\n', at) + 1;
      write_text(manifest, intact.substr(0, start) + intact.substr(at + name.size() + 2));
    }
    Communicator(MPI_COMM_WORLD).barrier();
    expect_refused_everywhere(*mesh, root, "/" + name + "' is not listed in the MANIFEST");
    Communicator(MPI_COMM_WORLD).barrier();
  }
  if (world_rank() == 0) write_text(manifest, intact);
  Communicator(MPI_COMM_WORLD).barrier();
}

// Issue 46: MANIFEST edits (a newline turned into \v, a truncation to 68 bytes) made
// verify pass while resume refused. Both apply one rule now: every single-byte edit
// and every truncation of the MANIFEST is refused by verify and by the load alike.
TEST_F(Checkpoint, EveryEditOfTheManifestIsRefusedByVerifyAndLoadAlike) {
  const std::string root = scratch_dir("manifest_edits");
  auto saved = make_model(mesh->tp(), 1);
  const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(io::CheckpointLayout::per_rank));
  const std::string manifest = (fs::path(dir) / "MANIFEST").string();
  std::vector<std::string> edits;
  if (world_rank() == 0) {
    const std::string intact = read_text(manifest);
    for (std::size_t i = 0; i < intact.size(); ++i) {
      for (char c : {'\v', static_cast<char>(intact[i] ^ 0x01)}) {
        std::string edited = intact;
        edited[i] = c;
        edits.push_back(edited);
      }
      edits.push_back(intact.substr(0, i));
    }
  }
  long count = static_cast<long>(edits.size());
  MPI_Bcast(&count, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  EXPECT_GT(count, 150);
  // Every edit through verify and the serial reader; the collective load through every
  // edit at 1 rank and every 20th at 2 and 4 (each costs collectives on a loaded machine).
  const long stride = world_size() == 1 ? 1 : 20;
  int verify_passed = 0, opened = 0, loaded = 0;
  for (long k = 0; k < count; ++k) {
    if (world_rank() == 0) {
      write_text(manifest, edits[static_cast<std::size_t>(k)]);
      verify_passed += io::verify_checkpoint(root).ok();
      try {
        io::CheckpointReader reader(root);
        ++opened;
      } catch (const IoError& e) {
        expect_contains(e.what(), "MANIFEST");
      }
    }
    if (k % stride != 0) continue;
    Communicator(MPI_COMM_WORLD).barrier();
    auto model = make_model(mesh->tp(), 2);
    try {
      io::load_checkpoint(root, *mesh, *model);
      ++loaded;
    } catch (const IoError& e) {
      expect_contains(e.what(), "MANIFEST");
    }
  }
  EXPECT_EQ(opened, 0);
  EXPECT_EQ(verify_passed, 0);
  EXPECT_EQ(loaded, 0);
}

// Regression (hardening issue): one flipped byte in a per_rank checkpoint's index file
// (HDF5 metadata, not data) crashed or hung the resume at 10 of the first 230 offsets
// tried. Bytes of the index, then of a slice file and of a shared file, are flipped in
// turn: each load fails with the same IoError on every rank naming the file,
// and the model is untouched.
TEST_F(Checkpoint, AFlippedByteAnywhereIsAnErrorNeverACrash) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("flip_") + std::string(io::checkpoint_layout_name(layout)));
    auto saved = make_model(mesh->tp(), 1);
    const std::string dir = io::save_checkpoint(root, *mesh, *saved, nullptr, save_options(layout));
    std::vector<std::string> names{"checkpoint.h5"};
    if (layout == io::CheckpointLayout::per_rank) names.push_back(io::rank_file_name(0));
    for (const std::string& name : names) {
      const std::string file = (fs::path(dir) / name).string();
      const auto size = static_cast<std::int64_t>(fs::file_size(file));
      int loads = 0;
      // Every 97th byte of the per_rank index (as in the report; every 291st at 4 ranks,
      // where each load costs more on an oversubscribed test machine), every 997th
      // byte of the other files.
      const bool index = layout == io::CheckpointLayout::per_rank && name == "checkpoint.h5";
      const std::int64_t stride = index ? (world_size() <= 2 ? 97 : 291) : 997;
      for (std::int64_t offset = 0; offset < size; offset += stride) {
        if (world_rank() == 0) toggle_bit(file, offset);
        Communicator(MPI_COMM_WORLD).barrier();
        auto model = make_model(mesh->tp(), 2);
        const auto message = same_error_everywhere<IoError>([&] { io::load_checkpoint(root, *mesh, *model); });
        expect_contains(message, name + "' is damaged");
        ++loads;
        if (world_rank() == 0) toggle_bit(file, offset);  // put the byte back
        Communicator(MPI_COMM_WORLD).barrier();
      }
      EXPECT_GT(loads, 10) << file;
    }
    // Restored: the checkpoint loads again.
    auto model = make_model(mesh->tp(), 2);
    EXPECT_NO_THROW(io::load_checkpoint(root, *mesh, *model));
  }
}

// Every injection point x both layouts x every rank as the one that fails (at 1, 2 and
// 4 ranks): the same error everywhere, no hang, nothing left behind.
TEST_F(Checkpoint, InjectedFailureLeavesThePreviousCheckpointLoadable) {
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("inject_") + std::string(io::checkpoint_layout_name(layout)));
    auto first = make_model(mesh->tp(), 1);
    const std::string committed = io::save_checkpoint(root, *mesh, *first, nullptr, save_options(layout, 1));
    auto second = make_model(mesh->tp(), 2);
    for (int victim = 0; victim < world_size(); ++victim) {
      for (const char* stage : {"prepare", "write", "index", "commit"}) {
        const std::string hook = std::to_string(victim) + ":" + stage;
        setenv("TESSERA_CKPT_FAIL", hook.c_str(), 1);
        const auto message = same_error_everywhere<IoError>(
            [&] { io::save_checkpoint(root, *mesh, *second, nullptr, save_options(layout, 2)); });
        unsetenv("TESSERA_CKPT_FAIL");
        expect_contains(message, "injected failure (TESSERA_CKPT_FAIL=" + hook + ")");
        expect_contains(message, "(on rank " + std::to_string(victim) + " of " + std::to_string(world_size()) + ")");
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
    auto p = model->named_parameters(), f = first->named_parameters();
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, f[i].second->value));
  }
}

TEST_F(Checkpoint, LatestPointerAndKeepLastRotation) {
  const std::string root = scratch_dir("rotation");
  for (std::int64_t step : {10, 20, 30, 40}) {
    auto model = make_model(mesh->tp(), static_cast<std::uint64_t>(step));
    auto options = save_options(step % 20 == 0 ? io::CheckpointLayout::per_rank : io::CheckpointLayout::shared, step);
    options.keep_last = 2;
    io::save_checkpoint(root, *mesh, *model, nullptr, options);
  }
  // Re-saving an existing step replaces it atomically.
  auto again = make_model(mesh->tp(), 41);
  auto options = save_options(io::CheckpointLayout::shared, 40);
  options.keep_last = 2;
  io::save_checkpoint(root, *mesh, *again, nullptr, options);
  if (world_rank() == 0) {
    EXPECT_EQ(io::list_checkpoints(root),
              (std::vector<std::string>{root + "/step_00000030", root + "/step_00000040"}));
    EXPECT_EQ(io::latest_checkpoint(root), root + "/step_00000040");
  }
  auto model = make_model(mesh->tp(), 1);
  const auto r = io::load_checkpoint(root, *mesh, *model);
  EXPECT_EQ(r.step, 40);
  auto p = model->named_parameters(), w = again->named_parameters();
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i].second->value, w[i].second->value));
  const auto message = same_error_everywhere<IoError>([&] { io::load_checkpoint(root + "/nothing", *mesh, *model); });
  expect_contains(message, "nothing' does not exist");
}

// Issue 46: a `latest` that is a directory read as an empty pointer ("holds ''").
TEST_F(Checkpoint, ALatestThatIsADirectoryIsNamedAsOne) {
  const std::string root = scratch_dir("latest_directory");
  if (world_rank() == 0) fs::create_directory(fs::path(root) / "latest");
  Communicator(MPI_COMM_WORLD).barrier();
  auto model = make_model(mesh->tp(), 1);
  const auto message = same_error_everywhere<IoError>([&] { io::load_checkpoint(root, *mesh, *model); });
  expect_contains(message, "its 'latest' pointer is a directory, not the one-line file a save writes: remove it");
}

// Issue 46: two ranks whose blocks of one tensor overlap wrote the shared file and then
// failed with an InternalError (the CRC pieces overlapped); blocks that leave elements
// out were saved, the gap reading back as zeros. Both are refused on every rank before
// any file exists, naming the tensor, the ranks and their boxes; the committed step
// stays the latest.
TEST_F(Checkpoint, BlocksThatOverlapOrLeaveAGapAreRefusedBeforeAnyWrite) {
  const int tp = mesh->tp_size(), t = mesh->rank(MeshDim::tp);
  MeshPlacement columns;
  columns.tp = Placement::shard(1);
  for (auto layout : kLayouts) {
    const std::string root = scratch_dir(std::string("tiles_") + std::string(io::checkpoint_layout_name(layout)));
    auto good = make_model(mesh->tp(), 1);
    const std::string committed = io::save_checkpoint(root, *mesh, *good, nullptr, save_options(layout, 1));
    for (bool gap : {false, true}) {
      if (!gap && tp == 1) continue;  // one tp rank cannot overlap itself
      // tp rank t writes columns [2t, 2t + 3) of 2 tp + 1 (overlap), or [2t, 2t + 1) of 2 tp (gap).
      Parameter w(Tensor::zeros({2, gap ? 1 : 3}, DType::f32), {2, gap ? 2 * tp : 2 * tp + 1}, columns, {0, 2 * t});
      const NamedParameters params{{"w", &w}};
      const auto message = same_error_everywhere<InvalidArgument>(
          [&] { io::save_checkpoint(root, *mesh, params, nullptr, save_options(layout, 2)); });
      expect_contains(message, "checkpoint: tensor /model/w [2, " + std::to_string(gap ? 2 * tp : 2 * tp + 1) + "]");
      if (gap) {
        expect_contains(message, "the ranks' blocks cover " + std::to_string(2 * tp) + " of its " +
                                     std::to_string(4 * tp) + " elements (rank 0 [0, 2) x [0, 1)");
      } else {
        expect_contains(message, "overlap (rank 0 writes [0, 2) x [0, 3), rank ");
        expect_contains(message, " writes [0, 2) x [2, 5); placement dp: Replicate, tp: Shard(1)");
        if (world_size() == 2) expect_contains(message, "the blocks of ranks 0 and 1 overlap");
      }
      if (world_rank() == 0) {
        EXPECT_EQ(io::list_checkpoints(root), std::vector<std::string>{committed});
        EXPECT_EQ(io::latest_checkpoint(root), committed);
        std::size_t entries = 0;
        for (const auto& e : fs::directory_iterator(root)) entries += e.path().filename() != "latest";
        EXPECT_EQ(entries, 1u) << "a refused save left files behind";
      }
    }
  }
}

// Regression (hardening issue): block_checksum added offset + extent and multiplied the
// global extents unchecked, so a caller-supplied offset or global shape near INT64_MAX
// wrapped and passed the bounds check. Both are ShapeErrors now.
TEST(BlockChecksum, HugeOffsetsAndUncountableGlobalShapesAreRejected) {
  const Tensor block = Tensor::zeros({2, 3}, DType::f32);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() - 1;
  EXPECT_THROW(io::block_checksum(block, {4, big}, {0, big}), ShapeError);  // offset + 3 wraps
  EXPECT_THROW(io::block_checksum(block, {big, big}, {0, 0}), ShapeError);  // big * big uncountable
  EXPECT_THROW(io::block_checksum(block, {4, 6}, {3, 0}), ShapeError);      // plainly outside
  EXPECT_NO_THROW(io::block_checksum(block, {4, 6}, {2, 3}));
}

// Regression (found by fuzz_checkpoint_reader): an attribute read as one value but
// stored as an array (format_version = [1, 1], or two strings for `format`) made HDF5
// write every element into a one-element buffer. Such a file is now an error naming
// the attribute, never an overflow.
TEST(CheckpointReader, ArrayAttributesWhereOneValueIsExpectedAreErrors) {
  const std::string dir = scratch_dir("array_attributes");  // collective
  if (world_rank() != 0) return;
  const std::string file = (fs::path(dir) / "checkpoint.h5").string();
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  // A valid `format` first: the reader checks it before format_version.
  const hid_t text = H5Tcopy(H5T_C_S1);
  H5Tset_size(text, H5T_VARIABLE);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t format = H5Acreate2(f, "format", text, scalar, H5P_DEFAULT, H5P_DEFAULT);
  const char* name = io::checkpoint_format_name;
  H5Awrite(format, text, &name);
  H5Aclose(format);
  H5Sclose(scalar);
  H5Tclose(text);
  const hsize_t two = 2;
  const hid_t space = H5Screate_simple(1, &two, nullptr);
  const std::int64_t values[2] = {1, 1};
  const hid_t attr = H5Acreate2(f, "format_version", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, values);
  H5Aclose(attr);
  H5Sclose(space);
  H5Fclose(f);
  try {
    io::CheckpointReader reader(file, io::CheckpointReader::Verify::none);
    ADD_FAILURE() << "a 2-element format_version was accepted";
  } catch (const Error& e) {
    expect_contains(e.what(), "'format_version' holds 2 values where one is expected");
  }
}

// Format version 1 (checksum tessera-hashsum64-v1) stays readable. The fixture in
// tests/checkpoint/data/format_v1 was written by write_reference_checkpoints before
// format 2 (tp 2, seed 2024, AdamW trained 2 steps); loading it at this test's layout
// verifies every block with the v1 algorithm, and the values must equal the serial twin
// trained the same way.
TEST_F(Checkpoint, FormatVersion1LoadsAndVerifiesAtAnyLayout) {
  const fs::path fixture = fs::path(TESSERA_TEST_SOURCE_DIR) / "data" / "format_v1";
  auto serial = make_serial_model(2024, /*with_bf16=*/true);
  {
    auto all = serial->named_parameters();
    AdamW adam(NamedParameters(all.begin(), all.begin() + 6), {});
    train(*serial, adam, 2);
  }
  const auto masters = serial->named_parameters();
  for (const char* layout : {"per_rank", "shared"}) {
    const io::CheckpointReader reader((fixture / layout).string());
    EXPECT_EQ(reader.header().format_version, 1);
    EXPECT_EQ(reader.header().checksum, io::ChecksumAlgorithm::hashsum64_v1);
    auto model = make_model(mesh->tp(), 5, /*with_bf16=*/true);
    const io::LoadResult r = io::load_checkpoint((fixture / layout).string(), *mesh, *model);
    EXPECT_EQ(r.step, 7);
    const auto got = model->named_parameters();
    ASSERT_EQ(got.size(), masters.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Parameter& p = *got[i].second;
      EXPECT_TRUE(same_bytes(p.value, block_of(masters[i].second->value, p.local_offset, p.value.shape())))
          << layout << " " << got[i].first;
    }
  }
}

// v2's definition (checksum.hpp) by hand for a few words, and the properties the format
// relies on: blocks of any tiling add up to the whole, a flipped bit or swapped
// elements change the sum, and v1 and v2 differ.
namespace {
std::uint32_t reference_fmix32(std::uint32_t z) {
  z ^= z >> 16;
  z *= 0x85ebca6bu;
  z ^= z >> 13;
  z *= 0xc2b2ae35u;
  return z ^ (z >> 16);
}
std::uint32_t reference_key(std::uint64_t j) {
  return static_cast<std::uint32_t>(j) * 0x9e3779b1u + static_cast<std::uint32_t>(j >> 32) * 0x85ebca77u + 0x165667b1u;
}
}  // namespace

TEST(BlockChecksum, Version2MatchesItsDefinitionForEveryElementSize) {
  // f32 [3, 5]: word j = i.
  Tensor f = Tensor::empty({3, 5}, DType::f32);
  std::uint64_t want = 0;
  for (std::int64_t i = 0; i < 15; ++i) {
    f.data<float>()[i] = 0.25f * static_cast<float>(i) - 1.0f;
    std::uint32_t w;
    std::memcpy(&w, &f.data<float>()[i], 4);
    want += reference_fmix32(w ^ reference_key(static_cast<std::uint64_t>(i)));
  }
  EXPECT_EQ(io::block_checksum(f, {3, 5}, {0, 0}, io::ChecksumAlgorithm::hashsum64_v2), want);
  // f64 [4] at offset 2 of [9]: words 2i, 2i + 1 (low, high).
  Tensor d = Tensor::empty({4}, DType::f64);
  want = 0;
  for (std::int64_t i = 0; i < 4; ++i) {
    d.data<double>()[i] = 1.0 / static_cast<double>(i + 3);
    std::uint64_t bits;
    std::memcpy(&bits, &d.data<double>()[i], 8);
    const std::uint64_t g = static_cast<std::uint64_t>(i + 2);
    want += reference_fmix32(static_cast<std::uint32_t>(bits) ^ reference_key(2 * g));
    want += reference_fmix32(static_cast<std::uint32_t>(bits >> 32) ^ reference_key(2 * g + 1));
  }
  EXPECT_EQ(io::block_checksum(d, {9}, {2}, io::ChecksumAlgorithm::hashsum64_v2), want);
  // bf16: the 16 bits zero-extended.
  Tensor b = Tensor::empty({2}, DType::bf16);
  std::uint16_t raw[2] = {0x3f80, 0xc000};
  std::memcpy(b.data(), raw, 4);
  want = reference_fmix32(0x3f80u ^ reference_key(0)) + reference_fmix32(0xc000u ^ reference_key(1));
  EXPECT_EQ(io::block_checksum(b, {2}, {0}, io::ChecksumAlgorithm::hashsum64_v2), want);
}

TEST(BlockChecksum, Version2BlocksOfAnyTilingAddUpAndDamageShows) {
  const std::int64_t rows = 37, cols = 1029;  // odd sizes: vector loops with remainders
  Tensor whole = Tensor::empty({rows, cols}, DType::f32);
  for (std::int64_t i = 0; i < rows * cols; ++i) whole.data<float>()[i] = std::sin(0.001f * static_cast<float>(i));
  const std::uint64_t total = io::block_checksum(whole, {rows, cols}, {0, 0});
  EXPECT_NE(total, io::block_checksum(whole, {rows, cols}, {0, 0}, io::ChecksumAlgorithm::hashsum64_v1));
  for (const auto& [r0, c0] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {10, 500}, {36, 7}}) {
    std::uint64_t sum = 0;
    for (const auto& [o, n] : std::vector<std::pair<Shape, Shape>>{{{0, 0}, {r0, c0}},
                                                                   {{0, c0}, {r0, cols - c0}},
                                                                   {{r0, 0}, {rows - r0, c0}},
                                                                   {{r0, c0}, {rows - r0, cols - c0}}}) {
      sum += io::block_checksum(block_of(whole, o, n), {rows, cols}, o);
    }
    EXPECT_EQ(sum, total) << "cut at " << r0 << ", " << c0;
  }
  // A view with strides and an unaligned copy give the same contribution.
  const Tensor column = whole.narrow(1, 3, 2);
  EXPECT_EQ(io::block_checksum(column, {rows, cols}, {0, 3}), io::block_checksum(column.contiguous(), {rows, cols}, {0, 3}));
  Tensor damaged = whole.clone();
  reinterpret_cast<std::uint32_t*>(damaged.data())[777] ^= 1u << 9;
  EXPECT_NE(io::block_checksum(damaged, {rows, cols}, {0, 0}), total);
  Tensor swapped = whole.clone();
  std::swap(swapped.data<float>()[5], swapped.data<float>()[6]);
  EXPECT_NE(io::block_checksum(swapped, {rows, cols}, {0, 0}), total);
}

// A writer hashes a block in pieces as it writes them (block_checksum_range): pieces cut
// anywhere (mid-row, across rows and planes) add up to the block's checksum.
TEST(BlockChecksum, RangesThatTileABlockAddUpToIt) {
  const Shape global = {6, 8, 9}, offset = {1, 2, 3};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    Tensor whole = Tensor::empty(global, dtype);
    auto* bytes = static_cast<unsigned char*>(whole.data());
    for (std::size_t k = 0; k < static_cast<std::size_t>(whole.nbytes()); ++k) bytes[k] = static_cast<unsigned char>(k * 131 + 7);
    const Tensor view = whole.narrow(0, 1, 3).narrow(1, 2, 4).narrow(2, 3, 5);  // strided
    const Tensor block = view.contiguous();
    for (io::ChecksumAlgorithm algorithm : {io::ChecksumAlgorithm::hashsum64_v1, io::ChecksumAlgorithm::hashsum64_v2}) {
      const std::uint64_t total = io::block_checksum(block, global, offset, algorithm);
      for (const std::vector<std::int64_t>& cuts : std::vector<std::vector<std::int64_t>>{
               {0, 60}, {0, 1, 7, 20, 33, 59, 60}, {0, 5, 10, 15, 20, 40, 60}, {0, 0, 23, 23, 60}}) {
        std::uint64_t sum = 0;
        for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
          sum += io::block_checksum_range(view, global, offset, cuts[k], cuts[k + 1] - cuts[k], algorithm);
        }
        EXPECT_EQ(sum, total) << dtype_name(dtype) << ", " << io::checksum_algorithm_name(algorithm) << ", "
                              << cuts.size() - 1 << " pieces";
      }
      // One element alone differs from its neighbour's (position-keyed).
      EXPECT_NE(io::block_checksum_range(block, global, offset, 6, 1, algorithm),
                io::block_checksum_range(block, global, offset, 7, 1, algorithm));
    }
    EXPECT_THROW(io::block_checksum_range(block, global, offset, 50, 11), ShapeError);
    EXPECT_THROW(io::block_checksum_range(block, global, offset, -1, 2), ShapeError);
    EXPECT_THROW(io::block_checksum_range(block, global, {4, 2, 3}, 0, 1), ShapeError);  // block outside
  }
}

TEST(BlockChecksum, UnknownAlgorithmNamesAreErrorsNamingTheFile) {
  EXPECT_EQ(io::parse_checksum_algorithm("tessera-hashsum64-v1", "f.h5"), io::ChecksumAlgorithm::hashsum64_v1);
  EXPECT_EQ(io::parse_checksum_algorithm("tessera-hashsum64-v2", "f.h5"), io::ChecksumAlgorithm::hashsum64_v2);
  try {
    io::parse_checksum_algorithm("md5", "/x/checkpoint.h5");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("'/x/checkpoint.h5' names checksum algorithm 'md5'"), std::string::npos)
        << e.what();
  }
}

// CRC-32C: the standard check value, and long buffers (three interleaved streams joined
// by multiplication mod the polynomial) equal to the same bytes fed in short pieces
// (one chain), at lengths around the block size and unaligned starts.
TEST(Crc32c, CheckValueAndInterleavedStreamsAgreeWithOneChain) {
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> bytes(200000 + 13);
  std::uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  for (std::size_t start : {std::size_t{0}, std::size_t{3}}) {
    for (std::size_t n : {std::size_t{24575}, std::size_t{24576}, std::size_t{24577}, std::size_t{3 * 24576 + 100},
                          std::size_t{200000}}) {
      std::uint32_t pieces = 0;
      for (std::size_t at = 0; at < n; at += 7) pieces = io::crc32c(&bytes[start + at], std::min<std::size_t>(7, n - at), pieces);
      EXPECT_EQ(io::crc32c(&bytes[start], n), pieces) << "length " << n << " from " << start;
    }
  }
}

TEST(Crc32c, CombineJoinsPiecesHashedApart) {
  std::vector<unsigned char> bytes(100000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  const std::uint32_t whole = io::crc32c(bytes.data(), bytes.size());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{77777}, bytes.size()}) {
    const std::uint32_t a = io::crc32c(bytes.data(), cut), b = io::crc32c(bytes.data() + cut, bytes.size() - cut);
    EXPECT_EQ(io::crc32c_combine(a, b, bytes.size() - cut), whole) << "cut at " << cut;
  }
}
