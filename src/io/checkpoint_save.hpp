#pragma once
// Private: what a save works with: the entries a rank saves, the fault-injection test
// hook, the save context, and the two layout writers (per_rank and shared).

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/format.hpp"
#include "io/manifest.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"

namespace tessera::io::detail {

// ---------------------------------------------------------------------------
// The fault-injection test hook (TESSERA_CKPT_FAIL="<rank>:<stage>").
// ---------------------------------------------------------------------------

struct FaultHook {
  int rank = -1;
  std::string stage;

  static FaultHook from_environment() {
    FaultHook hook;
    const char* text = std::getenv("TESSERA_CKPT_FAIL");
    if (text == nullptr || *text == '\0') return hook;
    const std::string value = text;
    const auto colon = value.find(':');
    static const std::set<std::string> stages = {"prepare", "write", "index", "commit"};
    char* end = nullptr;
    const long rank = colon == std::string::npos ? -1 : std::strtol(value.c_str(), &end, 10);
    if (colon == std::string::npos || end != value.c_str() + colon || rank < 0 ||
        stages.count(value.substr(colon + 1)) == 0) {
      throw ConfigError("TESSERA_CKPT_FAIL='" + value +
                        "' is not <rank>:<stage> with stage one of prepare, write, index, commit");
    }
    hook.rank = static_cast<int>(rank);
    hook.stage = value.substr(colon + 1);
    return hook;
  }

  void maybe_fail(int rank_now, std::string_view stage_now, const std::string& where) const {
    if (rank_now == rank && stage_now == stage) {
      throw IoError("checkpoint: injected failure (TESSERA_CKPT_FAIL=" + std::to_string(rank) + ":" + stage +
                    ") while " + where);
    }
  }
};

// ---------------------------------------------------------------------------
// What a rank saves (io/checkpoint_entries.cpp).
// ---------------------------------------------------------------------------

struct Entry {
  std::string section;  // "model" or "optimizer"
  std::string name;
  Tensor host;          // this rank's block, contiguous on the host
  Shape global_shape;
  MeshPlacement placement;
  Shape offset;
  bool writer = false;
  std::uint64_t checksum = 0;  // the whole tensor's, once the writers' shares are summed
  std::string path() const { return dataset_path(section, name); }
};

class SnapshotBuffers;

// This rank's entries: the parameters, then the optimizer's state, each checked (the
// checksums are computed as the layouts write the blocks). Without `snapshot` an entry's
// block is the tensor itself when it is a contiguous host tensor (a synchronous save
// writes before anything changes it); with one, every block is a copy in its buffers
// (an asynchronous save writes while training changes the tensors).
std::vector<Entry> collect_entries(const Mesh& mesh, const NamedParameters& params, Optimizer* optimizer,
                                   SnapshotBuffers* snapshot = nullptr);

// With a pipeline (mesh.pp_size() > 1) each stage holds its own tensors: the entries
// become the union over the stages, in one order on every rank, the other stages'
// tensors as entries this rank does not write. Ranks of one stage must agree, and a
// tensor may belong to one stage only (InvalidArgument otherwise). Collective; a no-op
// at pipeline 1.
void add_entries_of_other_stages(const Mesh& mesh, std::vector<Entry>& entries);

// A collective HDF5 write with ranks that disagree on the tensors would hang; compare a
// hash of (name, shape, dtype, placement) of every tensor across ranks first.
void check_same_tensors_everywhere(Communicator& world, const std::vector<Entry>& entries,
                                   const Optimizer* optimizer);

// The blocks the writing ranks (the main replicas) save of each tensor must tile its
// global array: no element written twice (the shared file's writes would overlap) and
// none left out (it would read back as zeros). Gathers every writer's block (offset,
// extent) and checks them before any file exists; InvalidArgument naming the tensor, and
// for an overlap the two ranks and their boxes, for a gap the elements left out. The
// same verdict on every rank (every rank checks the same gathered lists). Collective.
void check_blocks_tile(Communicator& world, const std::vector<Entry>& entries);

CheckpointHeader make_header(const Mesh& mesh, const SaveOptions& options, const Optimizer* optimizer);

// The header and the section groups of a checkpoint's main file (the shared file, the
// per_rank index): "model", and "optimizer" with the optimizer's type and step count
// when the header names one.
struct SectionGroups {
  H5Group model, optimizer;
  hid_t of(const std::string& section) const { return section == "model" ? model.get() : optimizer.get(); }
  void close() {
    optimizer.close();
    model.close();
  }
};
SectionGroups write_header_and_sections(hid_t file, const CheckpointHeader& h);

// The entry's block as `runs` for RawWriter, its checksum share computed on the way.
// The block must outlive the RawBlock.
RawBlock raw_block_of(const Entry& e, std::vector<RawRun> runs);

struct SaveContext {
  Communicator& world;
  std::vector<Entry>& entries;
  CheckpointHeader header;
  std::string temp_dir;
  FaultHook hook;
  std::vector<FileDigest> files;  // rank 0: every file written, for the MANIFEST
};

// The layouts: each writes the checkpoint into c.temp_dir (io/checkpoint_per_rank.cpp,
// io/checkpoint_shared.cpp).
void save_per_rank(SaveContext& c);
void save_shared(SaveContext& c);

// ---------------------------------------------------------------------------
// A save in two halves (io/checkpoint.cpp): what the step must provide (the entries,
// checked across ranks, and the header), then the write and the durable commit. A
// synchronous save runs both on the caller's thread; an asynchronous one runs the
// second on its writer thread over its own communicator. One writer for both.
// ---------------------------------------------------------------------------

struct PreparedSave {
  std::string root;
  std::string final_dir;
  SaveOptions options;
  std::vector<Entry> entries;
  CheckpointHeader header;
  FaultHook hook;
};

// Collective over mesh.world(): the checks of the options, the entries (copied into
// `snapshot` when given), the cross-rank checks and the header. Writes nothing.
PreparedSave prepare_save(const std::string& root, const Mesh& mesh, const NamedParameters& params,
                          Optimizer* optimizer, const SaveOptions& options, SnapshotBuffers* snapshot);

// Collective over `world` (a communicator of the same ranks, in the same order, as the
// mesh's world the save was prepared on): the temporary directory, the layout's files,
// the MANIFEST and the commit (`latest` last). Returns the committed directory. On an
// error (the same on every rank) the temporary directory is removed and committed
// checkpoints are untouched.
std::string write_prepared_save(PreparedSave& save, Communicator& world);

}  // namespace tessera::io::detail
