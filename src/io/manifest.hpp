#pragma once
// Private: the step directory's MANIFEST, one CRC-32C and size per file. Written last by
// a save (before the commit), checked before HDF5 opens any file of a load: a flipped
// byte anywhere, in data or in HDF5's own metadata, becomes an IoError naming the file
// instead of a crash or a hang inside the HDF5 library. Which files must be listed, and
// when they are checked, is step_files.hpp's rule.
//
//   tessera-checkpoint-manifest 1
//   <crc32c, 8 hex digits> <size in bytes> <file name>      one line per file

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// Writes dir/MANIFEST: to a temporary name, fsynced, renamed over it (the caller
// fsyncs the directory).
void write_manifest(const std::string& dir, const std::vector<FileDigest>& files);
// dir/MANIFEST with `files` added (an entry of the same name replaced), durably. For
// files the caller just wrote (merge's output) or was told to trust (the manifest
// command).
void update_manifest(const std::string& dir, const std::vector<FileDigest>& files);
// The manifest of `dir`, or nullopt when it has none. IoError for a damaged one: not
// exactly the lines write_manifest writes, cut short, a name listed twice, a MANIFEST
// that is not a regular file.
std::optional<std::vector<FileDigest>> read_manifest(const std::string& dir);

// IoError naming the file, unless dir/expected.name is a regular file with the recorded
// size and CRC.
void check_file(const std::string& dir, const FileDigest& expected);

// (name, size, crc) vectors for all_gather_vectors: the per_rank writers' digests to rank 0.
std::vector<std::int64_t> pack_digest(const FileDigest& d);
FileDigest unpack_digest(const std::vector<std::int64_t>& packed);

}  // namespace tessera::io::detail
