#pragma once
// Serial access to a checkpoint (no MPI communication): the header, the dataset list
// and hyperslab reads, plus the whole-checkpoint verify and merge that tessera-ckpt
// runs. Works on both layouts: per_rank reads go through the index's virtual datasets.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checksum.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/tensor.hpp"

namespace tessera::io {

// The root attributes (docs/checkpoint-format.md, "Root attributes").
struct CheckpointHeader {
  std::string format;                  // "tessera-checkpoint"
  std::int64_t format_version = 0;
  std::string tessera_version;
  CheckpointLayout layout = CheckpointLayout::shared;
  ParallelismConfig mesh;              // data mode, tp and domain degrees at save time
  std::int64_t dp = 1;                 // dp degree at save time
  std::int64_t world_size = 1;
  std::int64_t step = 0;
  std::string metadata;
  std::string checksum_algorithm;      // its name; `checksum` holds it parsed
  ChecksumAlgorithm checksum = ChecksumAlgorithm::hashsum64_v2;
  std::vector<std::int64_t> writer_ranks;  // per_rank: ranks that wrote a slice file
  std::string optimizer_type;          // empty when no optimizer state was saved
  std::int64_t optimizer_step_count = 0;
};

struct DatasetInfo {
  std::string path;       // "/model/fc.weight", "/optimizer/fc.weight.exp_avg"
  std::string section;    // "model" or "optimizer"
  std::string name;       // the FQN or state name
  Shape shape;            // global shape
  DType dtype = DType::f32;
  std::string placement;  // at save time, "dp: Replicate, tp: Shard(0), domain: Replicate"
  std::uint64_t checksum = 0;
};

// "<dir>/checkpoint.h5" for a step directory, the latest one for a root directory, the
// path itself for a file; throws IoError when there is none.
std::string resolve_checkpoint_file(const std::string& path);
// "checkpoint.rank00003.h5".
std::string rank_file_name(std::int64_t rank);

class CheckpointReader {
 public:
  // What the reader checks against the step directory's MANIFEST (the CRC-32C and size
  // of every file) before HDF5 opens anything: every file (the default: reading may
  // touch any of them), only the file it opens (enough for the header), or nothing
  // (the caller checked). A step directory without a MANIFEST, or whose MANIFEST does
  // not list a file of the step, is an IoError naming it (see write_checkpoint_manifest).
  enum class Verify { all_files, opened_file, none };

  // Opens `path` (see resolve_checkpoint_file) and reads the header and dataset list;
  // throws IoError / Hdf5Error naming the file, IoError naming a damaged file.
  explicit CheckpointReader(const std::string& path, Verify verify = Verify::all_files);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  const std::string& file() const;
  const CheckpointHeader& header() const;
  const std::vector<DatasetInfo>& datasets() const;
  const DatasetInfo* find(const std::string& path) const;  // nullptr when absent

  // The block [offset, offset + count) as a contiguous host tensor of the dataset's dtype.
  Tensor read(const DatasetInfo& dataset, const Shape& offset, const Shape& count) const;
  Tensor read(const DatasetInfo& dataset) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The checkpoint.h5 that `path` (file, step or root directory) names and its metadata
// text, read by rank 0 of `comm` and broadcast to every rank, so a large job does not
// open the file from every rank to read one attribute. Collective over `comm`; a failure
// to read (on rank 0) is thrown on every rank.
struct CheckpointMetadata {
  std::string file, metadata;
};
CheckpointMetadata read_checkpoint_metadata(const std::string& path, Communicator& comm);

struct VerifyReport {
  std::vector<std::string> passed;  // "/model/fc.weight"
  std::vector<std::string> failed;  // one line per problem, naming the dataset (and file)
  bool ok() const { return failed.empty(); }
};
// Checks every file against the step directory's MANIFEST (CRC-32C and size; a damaged
// file is reported and not opened; a missing MANIFEST or an unlisted file of the step
// is a problem, as for a load), then reads every dataset in full and checks its
// checksum; for per_rank, also that every slice file exists and each slice matches its
// own checksum (naming the rank file). A dataset whose checksum matches but which holds
// NaN or Inf is a problem too, naming how many values and the first one's index.
VerifyReport verify_checkpoint(const std::string& path);

// Writes a self-contained single file (layout shared, contiguous datasets, same
// attributes and checksums) from any checkpoint; written to a temporary name, fsynced
// and renamed, so `output_file` is complete or absent. Its CRC-32C and size are then
// added to the MANIFEST of its directory, so it is read like a step directory's file.
void merge_checkpoint(const std::string& path, const std::string& output_file);

// For a copy you trust whose MANIFEST is missing or incomplete (a step written before
// MANIFESTs existed, or whose *.h5 files were copied alone): adds to the MANIFEST of the
// step directory `path` (or of a checkpoint file's directory) the CRC-32C and size of
// each file of the step it does not list (checkpoint.h5, checkpoint.rank<R>.h5, the
// named file). Files it already lists are checked first: a mismatch is an IoError and
// nothing is written, so a damaged file is never listed as good. Returns the names
// added. HDF5 does not open anything; run verify_checkpoint after it.
std::vector<std::string> write_checkpoint_manifest(const std::string& path);

}  // namespace tessera::io
