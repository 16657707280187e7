#pragma once
// Private: the step directory's MANIFEST, one CRC-32C and size per file. Written last by
// a save (before the commit), checked before HDF5 opens any file of a load: a flipped
// byte anywhere, in data or in HDF5's own metadata, becomes an IoError naming the file
// instead of a crash or a hang inside the HDF5 library. Checkpoints without a MANIFEST
// (written before it existed) load as before.
//
//   tessera-checkpoint-manifest 1
//   <crc32c, 8 hex digits> <size in bytes> <file name>      one line per file

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm.hpp"

namespace tessera::io::detail {

inline constexpr const char* manifest_file_name = "MANIFEST";

struct FileDigest {
  std::string name;  // in the step directory
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
};

FileDigest digest_bytes(const std::string& name, const void* data, std::size_t size);
// Reads dir/name in large blocks. IoError naming the file when it cannot be read.
FileDigest digest_file(const std::string& dir, const std::string& name);

// Writes dir/MANIFEST durably (fsync).
void write_manifest(const std::string& dir, const std::vector<FileDigest>& files);
// The manifest of `dir`, or nullopt when it has none. IoError for a malformed one.
std::optional<std::vector<FileDigest>> read_manifest(const std::string& dir);

// IoError naming the file, unless dir/expected.name has the recorded size and CRC.
void check_file(const std::string& dir, const FileDigest& expected);

// Checks every file of the manifest of `dir` (nothing when there is none). With a
// communicator, collective: the files are shared out over its ranks and every rank
// throws the same error when any file is damaged. `only`: check just that file.
void verify_step_directory(const std::string& dir, Communicator* comm, const std::string& only = "");

// (name, size, crc) vectors for all_gather_vectors: the per_rank writers' digests to rank 0.
std::vector<std::int64_t> pack_digest(const FileDigest& d);
FileDigest unpack_digest(const std::vector<std::int64_t>& packed);

}  // namespace tessera::io::detail
