#include "io/manifest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/format.hpp"
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
  // To a temporary name, then renamed: a MANIFEST updated in place (by merge or the
  // manifest command) is never seen half-written.
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kHeader << "\n";
    for (const FileDigest& f : files) out << hex8(f.crc) << " " << f.size << " " << f.name << "\n";
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(temporary, ec);
      throw IoError("checkpoint: cannot write '" + path + "'");
    }
  }
  fsync_path(temporary, false);
  rename_path(temporary, path);
}

void update_manifest(const std::string& dir, const std::vector<FileDigest>& files) {
  std::vector<FileDigest> listed = read_manifest(dir).value_or(std::vector<FileDigest>{});
  for (const FileDigest& f : files) {
    auto same = std::find_if(listed.begin(), listed.end(), [&](const FileDigest& l) { return l.name == f.name; });
    if (same != listed.end()) {
      *same = f;
    } else {
      listed.push_back(f);
    }
  }
  write_manifest(dir, listed);
  fsync_path(dir, true);  // the rename is durable once the directory is
}

namespace {

// The largest MANIFEST read: about 40 bytes a file, room for a million slice files.
// Anything larger is not one tessera wrote (and /dev/zero must not be read forever).
constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{64} << 20;

bool is_hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A file name as a save writes it: no directory part, no space or control byte (a
// newline turned into another whitespace byte must not hide the entry after it).
bool is_plain_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name == manifest_file_name) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f && c != '/';
  });
}

// "<8 lowercase hex digits> <decimal size> <name>", exactly as write_manifest writes it.
std::optional<FileDigest> parse_line(const std::string& line) {
  const auto second = line.size() > 9 ? line.find(' ', 9) : std::string::npos;
  if (second == std::string::npos || line[8] != ' ') return std::nullopt;
  const std::string crc = line.substr(0, 8), size = line.substr(9, second - 9);
  if (!std::all_of(crc.begin(), crc.end(), is_hex_digit)) return std::nullopt;
  if (size.empty() || size.size() > 19 || (size.size() > 1 && size[0] == '0') ||
      !std::all_of(size.begin(), size.end(), is_digit)) {
    return std::nullopt;
  }
  FileDigest d;
  d.crc = static_cast<std::uint32_t>(std::strtoul(crc.c_str(), nullptr, 16));
  d.size = std::strtoull(size.c_str(), nullptr, 10);
  d.name = line.substr(second + 1);
  if (!is_plain_name(d.name)) return std::nullopt;
  return d;
}

// A damaged line as it can be printed: control bytes as \xNN, at most 120 bytes.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 120)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\x%02x", u);
      out += escape;
    }
  }
  return text.size() > 120 ? out + "..." : out;
}

std::string read_small_file(const std::string& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) throw IoError("checkpoint: cannot read '" + path + "': " + ec.message());
  if (bytes > kMaxManifestBytes) {
    throw IoError("checkpoint: '" + path + "' is damaged: " + std::to_string(bytes) +
                  " bytes, more than any MANIFEST (restore the step directory from an intact copy)");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError("checkpoint: cannot read '" + path + "'");
  return text;
}

}  // namespace

std::optional<std::vector<FileDigest>> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / manifest_file_name).string();
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) return std::nullopt;
  auto damaged = [&](const std::string& what) {
    return IoError("checkpoint: '" + path + "' is damaged: " + what +
                   " (restore the step directory from an intact copy)");
  };
  // Not followed if it is a link, never read if it is a FIFO or a device.
  if (!fs::is_regular_file(status)) throw damaged("it is not a regular file");
  const std::string text = read_small_file(path);
  // Every line ends with a newline: a MANIFEST cut short must not read as a shorter list.
  if (text.empty() || text.back() != '\n') throw damaged("its last line is incomplete (the file was cut short)");
  std::vector<FileDigest> files;
  std::size_t start = 0;
  for (int number = 1; start < text.size(); ++number) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (number == 1) {
      if (line != kHeader) throw damaged("its first line is not '" + std::string(kHeader) + "'");
      continue;
    }
    const auto d = parse_line(line);
    if (!d) {
      throw damaged("line " + std::to_string(number) + " is not '<crc32c> <size> <file name>': '" + printable(line) +
                    "'");
    }
    for (const FileDigest& seen : files) {
      if (seen.name == d->name) throw damaged("it lists '" + d->name + "' twice");
    }
    files.push_back(*d);
  }
  if (files.empty()) throw damaged("it lists no file");
  return files;
}

void check_file(const std::string& dir, const FileDigest& expected) {
  const std::string path = (fs::path(dir) / expected.name).string();
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) throw IoError("checkpoint: '" + path + "', listed in its MANIFEST, is missing");
  // A save writes regular files only; a FIFO or a device would block or never end.
  if (!fs::is_regular_file(status)) {
    throw IoError("checkpoint: '" + path + "', listed in its MANIFEST, is not a regular file (restore it)");
  }
  const auto size = fs::file_size(path, ec);
  if (ec) throw IoError("checkpoint: cannot read '" + path + "': " + ec.message());
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
