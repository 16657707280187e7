#pragma once
// Private: the pieces of the checkpoint format shared by the writers, the loader and
// the reader/tools: attribute names, header I/O, dataset paths, durable file steps.

#include <cstdint>
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
// closes it; then tessera writes the datasets' bytes from the tensors' memory at the
// offsets HDF5 chose (RawExtent), fsyncs, and hashes them from memory (HashedPiece);
// the MANIFEST digest joins those hashes in file order with the bytes between them
// (HDF5's metadata, a few KiB), read back. The caller checks free space before HDF5
// opens the file (check_free_space), so HDF5's small writes do not meet a full disk;
// failures in the raw writes are tessera's own, an IoError naming the file. per_rank
// slices are written so by one process, the shared file by every writing rank, each
// its own pieces (checkpoint_shared.cpp).
struct RawExtent {
  std::uint64_t offset = 0;  // in the file
  const void* data = nullptr;
  std::uint64_t bytes = 0;
};
struct HashedPiece {
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;  // CRC-32C of the piece's bytes alone
};
// A dcpl for such a dataset (contiguous, allocation at creation, no fill).
H5Plist laid_out_dataset_properties();
// The file offset of `dataset`'s contiguous storage, as a RawExtent over `data`.
RawExtent raw_extent_of(hid_t dataset, const void* data, std::uint64_t bytes);
// Writes `extents` into the existing file `path`, fsyncs it, and returns their hashes.
std::vector<HashedPiece> write_extents(const std::string& path, const std::vector<RawExtent>& extents);
// The digest of the whole file `path`: `pieces` (disjoint) from their hashes, the rest read.
FileDigest digest_with_pieces(const std::string& path, std::vector<HashedPiece> pieces);
// write_extents, then digest_with_pieces: a file written by one process.
FileDigest write_raw_extents(const std::string& path, const std::vector<RawExtent>& extents);

}  // namespace tessera::io::detail

namespace tessera::io::detail {

// std::filesystem::rename with the failure as an IoError naming both paths.
void rename_path(const std::string& from, const std::string& to);

}  // namespace tessera::io::detail
