#include "io/manifest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/format.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checksum.hpp"

namespace fs = std::filesystem;

namespace tessera::io::detail {

namespace {

constexpr const char* kHeader = "tessera-checkpoint-manifest 1";

std::string hex8(std::uint32_t v) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%08" PRIx32, v);
  return buffer;
}

}  // namespace

FileDigest digest_bytes(const std::string& name, const void* data, std::size_t size) {
  return {name, size, crc32c(data, size)};
}

FileDigest digest_file(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("checkpoint: cannot open '" + path + "': " + std::strerror(errno));
  std::vector<unsigned char> block(std::size_t{8} << 20);
  FileDigest d{name, 0, 0};
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      throw IoError("checkpoint: cannot read '" + path + "': " + std::strerror(saved));
    }
    if (n == 0) break;
    d.crc = crc32c(block.data(), static_cast<std::size_t>(n), d.crc);
    d.size += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return d;
}

void write_manifest(const std::string& dir, const std::vector<FileDigest>& files) {
  const std::string path = (fs::path(dir) / manifest_file_name).string();
  {
    std::ofstream out(path, std::ios::trunc);
    out << kHeader << "\n";
    for (const FileDigest& f : files) out << hex8(f.crc) << " " << f.size << " " << f.name << "\n";
    out.flush();
    if (!out) throw IoError("checkpoint: cannot write '" + path + "'");
  }
  fsync_path(path, false);
}

std::optional<std::vector<FileDigest>> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / manifest_file_name).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line != kHeader) {
    throw IoError("checkpoint: '" + path + "' is damaged (its first line is not '" + std::string(kHeader) + "')");
  }
  std::vector<FileDigest> files;
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string crc, name;
    FileDigest d;
    char* end = nullptr;
    if (!(fields >> crc >> d.size >> name) || crc.size() != 8 ||
        (d.crc = static_cast<std::uint32_t>(std::strtoul(crc.c_str(), &end, 16)), *end != '\0') ||
        name.find('/') != std::string::npos || name == "." || name == "..") {
      throw IoError("checkpoint: '" + path + "' is damaged at line " + std::to_string(number) + ": '" + line + "'");
    }
    d.name = name;
    files.push_back(std::move(d));
  }
  if (files.empty()) throw IoError("checkpoint: '" + path + "' lists no file");
  return files;
}

void check_file(const std::string& dir, const FileDigest& expected) {
  const std::string path = (fs::path(dir) / expected.name).string();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw IoError("checkpoint: '" + path + "', listed in its MANIFEST, is missing: " + ec.message());
  if (size != expected.size) {
    throw IoError("checkpoint: '" + path + "' is damaged: " + std::to_string(size) + " bytes, the MANIFEST says " +
                  std::to_string(expected.size));
  }
  const FileDigest got = digest_file(dir, expected.name);
  if (got.crc != expected.crc) {
    throw IoError("checkpoint: '" + path + "' is damaged: its CRC-32C is " + hex8(got.crc) + ", the MANIFEST says " +
                  hex8(expected.crc) + " (a changed byte; restore it or load another step)");
  }
}

void verify_step_directory(const std::string& dir, Communicator* comm, const std::string& only) {
  auto check_share = [&](int rank, int size) {
    const auto files = read_manifest(dir);
    if (!files) return;
    bool listed = only.empty();
    for (std::size_t i = 0; i < files->size(); ++i) {
      const FileDigest& f = (*files)[i];
      if (!only.empty() && f.name != only) continue;
      listed = true;
      if (static_cast<int>(i % static_cast<std::size_t>(size)) == rank || !only.empty()) check_file(dir, f);
    }
    if (!listed) throw IoError("checkpoint: '" + only + "' is not listed in the MANIFEST of '" + dir + "'");
  };
  if (comm == nullptr) {
    check_share(0, 1);
    return;
  }
  agree_on_success(comm->mpi_comm(), [&] {
    if (only.empty()) {
      check_share(comm->rank(), comm->size());
    } else if (comm->rank() == 0) {
      check_share(0, 1);
    }
  });
}

std::vector<std::int64_t> pack_digest(const FileDigest& d) {
  std::vector<std::int64_t> v{static_cast<std::int64_t>(d.size), static_cast<std::int64_t>(d.crc)};
  for (char ch : d.name) v.push_back(static_cast<unsigned char>(ch));
  return v;
}

FileDigest unpack_digest(const std::vector<std::int64_t>& packed) {
  if (packed.size() < 2) throw InternalError("checkpoint: an empty file digest");
  FileDigest d;
  d.size = static_cast<std::uint64_t>(packed[0]);
  d.crc = static_cast<std::uint32_t>(packed[1]);
  for (std::size_t i = 2; i < packed.size(); ++i) d.name += static_cast<char>(packed[i]);
  return d;
}

}  // namespace tessera::io::detail
