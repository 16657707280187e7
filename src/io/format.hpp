#pragma once
// Private: the pieces of the checkpoint format shared by the writers, the loader and
// the reader/tools: attribute names, header I/O, dataset paths, durable file steps.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/hdf5_handles.hpp"
#include "io/manifest.hpp"
#include "tessera/io/checkpoint_reader.hpp"

namespace tessera::io::detail {

// "/model/fc.weight": the FQN is one link name inside the section group.
std::string dataset_path(const std::string& section, const std::string& name);

// Root attributes (every field of the header that applies to the file kind).
void write_header(hid_t file, const CheckpointHeader& header);
CheckpointHeader read_header(hid_t file, const std::string& file_name);

// Per-dataset attributes: placement, dtype, checksum.
void write_dataset_attributes(hid_t dataset, const std::string& placement, DType dtype, std::uint64_t checksum);

// A group that tracks link creation order, so tools list tensors in model order.
H5Group create_ordered_group(hid_t file, const std::string& name);

// Durability: flush a closed file's data, and a directory's entries, to stable storage.
void fsync_path(const std::string& path, bool directory);

// Checks that `dir` can take a file of `bytes` now: reserves them in a probe file
// (posix_fallocate, which also meets a process's file-size limit) and removes it.
// IoError naming the directory and the reason (No space left on device, File too
// large, Disk quota exceeded); a file system that cannot reserve space (EOPNOTSUPP) is
// not checked.
void check_free_space(const std::string& dir, std::uint64_t bytes);

// Files written by one process (per_rank slices and index) are built in memory with
// HDF5's core driver (no backing store) and written to disk in one piece by
// write_memory_file: a full disk, a file-size limit or an I/O error then surfaces in
// tessera's own write or fsync as an IoError naming the file, while HDF5 never holds a
// half-written file open (a failed HDF5 close used to leave one, which MPI_Finalize then
// crashed closing). One large write is also the fastest way to the disk. The cost is a
// second copy of the file's bytes in memory while it is written.
H5File create_memory_file();
// Flushes `file`, writes its image to `path` (a new file: O_EXCL), fsyncs it and closes
// `file`. IoError naming `path` and the system's reason on any failure; a partly written
// file is removed.
// Returns the file's digest for the MANIFEST (computed from the image: no re-read).
FileDigest write_memory_file(H5File& file, const std::string& path);

// Large files take another way, which copies nothing: HDF5 lays the file out on disk
// (metadata, and room for every dataset: contiguous, allocated early, never filled) and
// flushes it, keeping it open; then tessera writes the datasets' bytes from the tensors'
// memory at the offsets HDF5 chose (RawBlock, RawWriter), hashing them on the way; the
// checksum attributes, written as placeholders of the same size, get their values
// (set_dataset_checksum) and HDF5 closes the file, rewriting those few bytes in place;
// then tessera fsyncs. The MANIFEST digest joins the written runs' CRCs in file order
// with the bytes between them (HDF5's metadata, a few KiB), read back. The caller checks
// free space before HDF5 opens the file (check_free_space), so HDF5's writes do not meet
// a full disk; failures in the raw writes are tessera's own, an IoError naming the file.
// per_rank slices are written so by one process, the shared file by every writing rank,
// each its own blocks (checkpoint_shared.cpp).

// A run of a block: contiguous both in the block's memory and in the file.
struct RawRun {
  std::uint64_t file_offset = 0, block_offset = 0, bytes = 0;  // block_offset: bytes into the block
};
// A contiguous block written as runs that tile it in block order (one for a whole
// dataset; a block of a shared dataset's rows may be many).
struct RawBlock {
  const unsigned char* data = nullptr;
  std::size_t element_size = 1;
  std::vector<RawRun> runs;
  // The block checksum's share of elements [first, first + count) (block_checksum_range).
  std::function<std::uint64_t(std::int64_t first, std::int64_t count)> checksum;
};
struct HashedPiece {
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;  // CRC-32C of the piece's bytes alone
};
struct WrittenBlocks {
  std::vector<HashedPiece> pieces;       // one per run
  std::vector<std::uint64_t> checksums;  // one per block
};
// A dcpl for such a dataset (contiguous, allocation at creation, no fill).
H5Plist laid_out_dataset_properties();
// The file offset of `dataset`'s contiguous storage.
std::uint64_t storage_offset_of(hid_t dataset);
// Sets the "checksum" attribute that write_dataset_attributes created (same type and
// size: HDF5 rewrites the value in place, the file's layout stays as it was laid out).
void set_dataset_checksum(hid_t dataset, std::uint64_t checksum);

// tessera's own descriptor on a file HDF5 laid out (and has flushed).
class RawWriter {
 public:
  explicit RawWriter(std::string path);
  RawWriter(const RawWriter&) = delete;
  RawWriter& operator=(const RawWriter&) = delete;
  ~RawWriter();
  // Writes the blocks, each in cache-sized chunks: a chunk is checksummed (reading it
  // from memory once), CRC'd and written while it is in cache, and its write-back is
  // started at once, so the disk works while the next chunks are hashed.
  WrittenBlocks write(const std::vector<RawBlock>& blocks);
  // fsync (the data, and whatever HDF5 wrote to the file before), then close.
  void sync_and_close();

 private:
  std::string path_;
  int fd_ = -1;
};

// The digest of the whole file `path`: `pieces` (disjoint) from their hashes, the rest read.
FileDigest digest_with_pieces(const std::string& path, std::vector<HashedPiece> pieces);

}  // namespace tessera::io::detail

namespace tessera::io::detail {

// std::filesystem::rename with the failure as an IoError naming both paths.
void rename_path(const std::string& from, const std::string& to);

}  // namespace tessera::io::detail
