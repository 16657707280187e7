#pragma once
// Sharded HDF5 checkpoints (docs/checkpoint-format.md): every rank stores the slices it
// owns, the file presents every parameter at its global (master) shape, and a load
// reads exactly the hyperslab each rank's *current* parameter needs, so a checkpoint
// written at tp=2 loads at tp=4, serially, or under another dp/domain layout.
//
// Which rank writes what is read off Parameter::placement alone: a rank writes its
// block when its coordinate is 0 along every mesh dimension where the parameter is
// Replicate (the "main replica"); no layer type is special-cased.
//
// Both calls are collective over mesh.world(). Every step that can fail on some ranks
// only is agreed (agree.hpp), so a failure anywhere raises the same error everywhere.
//
// On disk (root = the directory given to save_checkpoint):
//   root/step_00000100/checkpoint.h5             shared file, or the per-rank index
//   root/step_00000100/checkpoint.rank00003.h5   per_rank slice files
//   root/latest                                  "step_00000100", replaced atomically
// A save writes into root/.step_00000100.tmp-<nonce>/, fsyncs every file, agrees, then
// renames the directory into place: a reader never sees a half-written checkpoint and
// the previous one is untouched until the new one is complete.
//
// io/async_checkpoint.hpp saves the same files in the background: the tensors are copied
// to host memory and a writer thread runs this save's write and commit on the copy.
//
// Test hook: TESSERA_CKPT_FAIL="<rank>:<stage>" (stage: prepare, write, index, commit)
// makes that rank throw IoError at that stage of every save (write: after its first
// dataset), to test that failures are agreed and leave earlier checkpoints intact.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"

namespace tessera::io {

enum class CheckpointLayout {
  per_rank,  // each writing rank: its own file (serial HDF5); rank 0: an index of virtual datasets
  shared,    // one file, parallel HDF5 (MPI-IO), collective hyperslab writes
};
std::string_view checkpoint_layout_name(CheckpointLayout layout) noexcept;  // "per_rank" "shared"
// Throws InvalidArgument naming the text.
CheckpointLayout parse_checkpoint_layout(std::string_view text);

inline constexpr const char* checkpoint_format_name = "tessera-checkpoint";
inline constexpr std::int64_t checkpoint_format_version = 2;
inline constexpr const char* checkpoint_file_name = "checkpoint.h5";

struct SaveOptions {
  CheckpointLayout layout = CheckpointLayout::shared;
  std::int64_t step = 0;   // >= 0; names the directory and is stored as an attribute
  std::string metadata;    // free text stored verbatim (e.g. the model config as YAML)
  int keep_last = 0;       // > 0: after the commit, keep only the newest N step directories
};

struct LoadOptions {
  // strict: every selected parameter (and optimizer state) must be in the file, and —
  // when no subset is named — the file may hold nothing the model lacks.
  // non-strict: what is missing on either side is skipped and reported.
  bool strict = true;
  // Load only these parameter FQNs (and their optimizer state); empty: all.
  std::vector<std::string> only;
  bool verify_checksums = true;
  // How the messages of a load show a shape (the stored one, the tensor's): empty, as
  // tessera's C-order extents "[a, b, c]"; the C API passes its Fortran callers'
  // declaration order.
  std::function<std::string(const Shape&)> describe_shape;
};

struct LoadResult {
  std::string file;                     // the checkpoint.h5 that was read
  std::int64_t step = 0;
  std::string metadata;
  CheckpointLayout layout = CheckpointLayout::shared;
  ParallelismConfig saved_mesh;         // the layout it was written at
  std::int64_t saved_world_size = 1;
  std::vector<std::string> loaded;      // dataset paths, e.g. "/model/fc.weight"
  std::vector<std::string> missing;     // non-strict: selected tensors the file lacks
  std::vector<std::string> unexpected;  // non-strict: datasets the model lacks
};

// Saves `params` (and the optimizer's state and step count, when given) into
// root/step_<step>/ and points root/latest at it. Returns the committed directory.
std::string save_checkpoint(const std::string& root, const Mesh& mesh, const NamedParameters& params,
                            Optimizer* optimizer, const SaveOptions& options);
std::string save_checkpoint(const std::string& root, const Mesh& mesh, nn::Module& model,
                            Optimizer* optimizer = nullptr, const SaveOptions& options = {});

// Loads from `path`: a checkpoint.h5 file, a step directory, or a root directory
// (through its `latest` pointer). Names, shapes or dtypes that do not match, and
// checksum mismatches, fail on every rank with an error naming the dataset.
LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, const NamedParameters& params,
                           Optimizer* optimizer, const LoadOptions& options);
LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, nn::Module& model,
                           Optimizer* optimizer = nullptr, const LoadOptions& options = {});

// "step_00000100".
std::string checkpoint_directory_name(std::int64_t step);
// The step directory root/latest points at (full path), or nullopt when root has no
// `latest` pointer. A pointer that is not the name of a step directory of this root
// (an absolute path, "..", a link, garbage, or a directory that is gone) is an IoError
// naming the root and the pointer's text: it is never followed.
std::optional<std::string> latest_checkpoint(const std::string& root);
// Removes what killed saves leave in root: ".step_<N>.tmp-*" and ".step_<N>.old-*"
// directories whose step N is not newer than the newest committed step (a newer one may
// be a save in progress). Returns how many were removed. save_checkpoint calls it (rank
// 0) before each save; tessera-run at start.
int remove_stale_checkpoint_temporaries(const std::string& root);
// The committed step directories under root (full paths), oldest step first.
std::vector<std::string> list_checkpoints(const std::string& root);

}  // namespace tessera::io
