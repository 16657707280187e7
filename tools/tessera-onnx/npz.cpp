// A minimal stored (uncompressed) zip writer for .npz files (npz.hpp): local headers, the
// central directory and its end record, every field little-endian.
#include "npz.hpp"

#include <array>
#include <cstdint>
#include <fstream>
#include <limits>
#include <vector>

#include "npy.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx_tool {

namespace {

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

void put16(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}

void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

struct Entry {
  std::string name;
  std::uint32_t crc = 0;
  std::uint32_t size = 0;
  std::uint32_t offset = 0;
};

constexpr std::uint32_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: no clock in the file

// The fields a local header and a central directory record share.
void put_common(std::string& out, const Entry& e) {
  put16(out, 20);  // version needed to extract: 2.0
  put16(out, 0);   // flags
  put16(out, 0);   // stored
  put16(out, 0);   // time
  put16(out, kDosDate1980);
  put32(out, e.crc);
  put32(out, e.size);  // compressed = uncompressed
  put32(out, e.size);
  put16(out, static_cast<std::uint32_t>(e.name.size()));
  put16(out, 0);  // extra field length
}

std::uint32_t fits32(std::size_t n, const std::string& path) {
  if (n > std::numeric_limits<std::uint32_t>::max() - 1) {
    throw UnsupportedError("'" + path + "' would exceed 4 GiB, which this .npz writer (no zip64) does not write");
  }
  return static_cast<std::uint32_t>(n);
}

}  // namespace

std::uint32_t crc32(const std::string& bytes) {
  static const std::array<std::uint32_t, 256> table = crc_table();
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  std::string out;
  std::vector<Entry> entries;
  for (const auto& array : arrays) {
    const std::string data = npy_bytes(array.second);
    Entry e{array.first + ".npy", crc32(data), fits32(data.size(), path), fits32(out.size(), path)};
    put32(out, 0x04034b50);
    put_common(out, e);
    out += e.name;
    out += data;
    entries.push_back(e);
  }
  const std::uint32_t directory_at = fits32(out.size(), path);
  for (const Entry& e : entries) {
    put32(out, 0x02014b50);
    put16(out, 20);  // made by: 2.0
    put_common(out, e);
    put16(out, 0);  // comment length
    put16(out, 0);  // disk
    put16(out, 0);  // internal attributes
    put32(out, 0);  // external attributes
    put32(out, e.offset);
    out += e.name;
  }
  const std::uint32_t directory_size = fits32(out.size() - directory_at, path);
  if (entries.size() > 0xffff) throw UnsupportedError("'" + path + "' would hold more than 65535 arrays");
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put32(out, directory_size);
  put32(out, directory_at);
  put16(out, 0);  // comment length
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.close();
  if (!file) throw IoError("could not write '" + path + "'");
}

}  // namespace tessera::onnx_tool
