#include "tessera/io/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>

#include "io/format.hpp"
#include "io/json.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::io {

// The format is little-endian and tensors are copied byte for byte: on a big-endian
// host every element would need swapping, which nothing here does.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The Rust reference implementation refuses headers above 100 MB; so does this reader,
// before allocating anything of the size a (possibly damaged) file claims.
constexpr std::uint64_t max_header_bytes = 100'000'000;

struct DTypeInfo {
  const char* name;
  std::size_t size;
  enum Family { floating, integer, boolean } family;
};

constexpr DTypeInfo dtype_table[] = {
    {"F64", 8, DTypeInfo::floating}, {"F32", 4, DTypeInfo::floating}, {"F16", 2, DTypeInfo::floating},
    {"BF16", 2, DTypeInfo::floating}, {"I64", 8, DTypeInfo::integer}, {"I32", 4, DTypeInfo::integer},
    {"I16", 2, DTypeInfo::integer}, {"I8", 1, DTypeInfo::integer}, {"U64", 8, DTypeInfo::integer},
    {"U32", 4, DTypeInfo::integer}, {"U16", 2, DTypeInfo::integer}, {"U8", 1, DTypeInfo::integer},
    {"BOOL", 1, DTypeInfo::boolean},
};

const DTypeInfo* dtype_info(std::string_view name) {
  for (const auto& d : dtype_table) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// A name as a message can show it: an embedded NUL as \u0000 (it would cut the text).
std::string printable(const std::string& name) {
  std::string out;
  for (char c : name) out += c == '\0' ? std::string("\\u0000") : std::string(1, c);
  return out;
}

std::string where(const std::string& path, const std::string& tensor) {
  return "safetensors file '" + path + "', tensor '" + printable(tensor) + "'";
}

// HDF5 names, C strings, end at a NUL: "w\u0000x" would become "w" and meet the real "w".
bool holds_nul(const std::string& name) { return name.find('\0') != std::string::npos; }

// Weights that are not finite are refused where they enter: they would train or predict
// NaN with nothing to say where it came from.
template <class T>
void check_finite(std::span<const T> values, const std::string& at) {
  const auto bad = tessera::detail::first_non_finite(values);
  if (!bad) return;
  throw IoError(at + ": element " + std::to_string(*bad) + " is " +
                tessera::detail::non_finite_kind(static_cast<double>(values[*bad])) +
                "; tessera refuses weights that are not finite (fix or drop the tensor at its source)");
}

void check_finite(const Tensor& t, const std::string& at) {
  const auto n = static_cast<std::size_t>(t.numel());
  switch (t.dtype()) {
    case DType::f32: return check_finite(std::span<const float>(t.data<float>(), n), at);
    case DType::f64: return check_finite(std::span<const double>(t.data<double>(), n), at);
    case DType::bf16: {
      std::vector<float> wide(n);
      for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<float>(t.data<bfloat16>()[i]);
      return check_finite(std::span<const float>(wide), at);
    }
    case DType::i64: return;
  }
}

// IEEE half (binary16) bits to float, exactly (every half is a float).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero and subnormals
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  std::uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Element i of a floating tensor's bytes, in double (exact for every source dtype).
double floating_at(const DTypeInfo& d, const unsigned char* bytes, std::size_t i) {
  const unsigned char* p = bytes + i * d.size;
  switch (d.size) {
    case 8: return load<double>(p);
    case 4: return load<float>(p);
    default: {
      const auto h = load<std::uint16_t>(p);
      return std::string_view(d.name) == "BF16" ? bfloat16::to_float(h) : half_to_float(h);
    }
  }
}

std::int64_t integer_at(const DTypeInfo& d, const unsigned char* bytes, std::size_t i, bool& fits) {
  const unsigned char* p = bytes + i * d.size;
  const std::string_view n = d.name;
  if (n == "I64") return load<std::int64_t>(p);
  if (n == "I32") return load<std::int32_t>(p);
  if (n == "I16") return load<std::int16_t>(p);
  if (n == "I8") return load<std::int8_t>(p);
  if (n == "U32") return load<std::uint32_t>(p);
  if (n == "U16") return load<std::uint16_t>(p);
  if (n == "U8" || n == "BOOL") return *p;
  const auto u = load<std::uint64_t>(p);  // U64
  if (u > static_cast<std::uint64_t>(INT64_MAX)) fits = false;
  return static_cast<std::int64_t>(u);
}

std::string read_exactly(std::ifstream& in, std::uint64_t offset, std::uint64_t size, const std::string& what) {
  std::string bytes(size, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (size != 0) in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in) throw IoError(what + ": cannot read " + std::to_string(size) + " bytes at offset " + std::to_string(offset));
  return bytes;
}

}  // namespace

std::size_t safetensors_dtype_size(std::string_view dtype) noexcept {
  const DTypeInfo* d = dtype_info(dtype);
  return d == nullptr ? 0 : d->size;
}

constexpr tessera::detail::EnumName<DType> kSafetensorsDtypeNames[] = {
    {DType::f32, "F32"},
    {DType::f64, "F64"},
    {DType::bf16, "BF16"},
    {DType::i64, "I64"},
};

std::string_view safetensors_dtype_name(DType dtype) noexcept {
  return tessera::detail::name_of(kSafetensorsDtypeNames, dtype);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string file = "safetensors file '" + path + "'";
  tessera::detail::require_regular_file(path, "safetensors file");
  std::error_code ec;
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(file + ": cannot read it: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(file + ": cannot open it: " + std::strerror(errno));
  if (file_size < 8) {
    throw IoError(file + " is " + std::to_string(file_size) +
                  " bytes long: too short for the 8-byte header length (is it a safetensors file?)");
  }
  const auto length_bytes = read_exactly(in, 0, 8, file);
  const auto header_size = load<std::uint64_t>(reinterpret_cast<const unsigned char*>(length_bytes.data()));
  if (header_size > file_size - 8 || header_size > max_header_bytes) {
    throw IoError(file + ": the header length is " + std::to_string(header_size) + " bytes but the file has " +
                  std::to_string(file_size - 8) + " bytes after it (limit " + std::to_string(max_header_bytes) +
                  "; is it a safetensors file?)");
  }
  data_start_ = 8 + header_size;
  const std::uint64_t data_size = file_size - data_start_;
  const std::string header_text = read_exactly(in, 8, header_size, file);
  const detail::JsonValue header = detail::parse_json(header_text, file + " header");
  if (header.kind != detail::JsonValue::Kind::object) {
    throw IoError(file + ": the header is " + std::string(header.kind_name()) + ", expected a JSON object");
  }

  for (const auto& [name, value] : header.members) {
    if (name == "__metadata__") {
      if (value.kind != detail::JsonValue::Kind::object) {
        throw IoError(file + ": __metadata__ is " + std::string(value.kind_name()) + ", expected an object of strings");
      }
      for (const auto& [key, text] : value.members) {
        if (text.kind != detail::JsonValue::Kind::string) {
          throw IoError(file + ": __metadata__ entry '" + key + "' is " + std::string(text.kind_name()) +
                        ", expected a string");
        }
        metadata_[key] = text.text;
      }
      continue;
    }
    const std::string at = where(path, name);
    if (name.empty()) throw IoError(file + ": a tensor has an empty name");
    if (holds_nul(name)) throw IoError(at + ": the name holds a NUL character (\\u0000), which no tensor name may hold");
    if (value.kind != detail::JsonValue::Kind::object) {
      throw IoError(at + ": the entry is " + std::string(value.kind_name()) + ", expected an object");
    }
    SafetensorsEntry e;
    e.name = name;
    const detail::JsonValue* dtype = value.member("dtype");
    const detail::JsonValue* shape = value.member("shape");
    const detail::JsonValue* offsets = value.member("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
      throw IoError(at + ": the entry needs dtype, shape and data_offsets");
    }
    for (const auto& [key, unused] : value.members) {
      (void)unused;
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        throw IoError(at + ": unknown field '" + key + "' (expected dtype, shape, data_offsets)");
      }
    }
    if (dtype->kind != detail::JsonValue::Kind::string) throw IoError(at + ": dtype must be a string");
    e.dtype = dtype->text;
    const DTypeInfo* info = dtype_info(e.dtype);
    if (info == nullptr) {
      throw IoError(at + ": unknown dtype '" + e.dtype +
                    "' (tessera reads F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL)");
    }
    if (shape->kind != detail::JsonValue::Kind::array) throw IoError(at + ": shape must be an array of integers");
    // The element count, with every product checked against overflow of int64.
    std::uint64_t numel = 1;
    for (const auto& extent : shape->items) {
      std::uint64_t n = 0;
      if (!detail::json_uint64(extent, n) || n > static_cast<std::uint64_t>(INT64_MAX)) {
        throw IoError(at + ": shape holds '" + extent.text + "', expected non-negative integers");
      }
      e.shape.push_back(static_cast<std::int64_t>(n));
      if (n != 0 && numel > static_cast<std::uint64_t>(INT64_MAX) / n) {
        throw IoError(at + ": shape " + shape_str(e.shape) + " has more elements than fit in int64");
      }
      numel *= n;
    }
    if (offsets->kind != detail::JsonValue::Kind::array || offsets->items.size() != 2 ||
        !detail::json_uint64(offsets->items[0], e.begin) || !detail::json_uint64(offsets->items[1], e.end)) {
      throw IoError(at + ": data_offsets must be two non-negative integers [begin, end]");
    }
    if (e.begin > e.end || e.end > data_size) {
      throw IoError(at + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                    ") do not lie inside the data section of " + std::to_string(data_size) +
                    " bytes (the header lies about the offsets, or the file is truncated)");
    }
    if (numel > UINT64_MAX / info->size || e.end - e.begin != numel * info->size) {
      throw IoError(at + ": " + e.dtype + shape_str(e.shape) + " needs " + std::to_string(numel * info->size) +
                    " bytes but data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                    ") hold " + std::to_string(e.end - e.begin));
    }
    tensors_.push_back(std::move(e));
  }

  // The entries must tile the data section: sorted by offset, each starts where the
  // previous ended, and the last ends at the end of the file. An overlap would make two
  // tensors share bytes, a gap would hide unindexed data.
  std::stable_sort(tensors_.begin(), tensors_.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  std::uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : tensors_) {
    if (e.begin != expected) {
      throw IoError(where(path, e.name) + ": its bytes start at " + std::to_string(e.begin) + " but " +
                    (previous == nullptr ? std::string("the data section starts at 0")
                                         : "tensor '" + previous->name + "' ends at " + std::to_string(expected)) +
                    (e.begin < expected ? " (the tensors overlap)" : " (a gap of unindexed bytes)"));
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size) {
    throw IoError(file + ": the tensors end at byte " + std::to_string(expected) + " of the data section but it holds " +
                  std::to_string(data_size) + " bytes (trailing bytes no tensor indexes)");
  }
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : tensors_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Tensor SafetensorsFile::read(const SafetensorsEntry& entry, std::optional<DType> floating) const {
  const DTypeInfo* info = dtype_info(entry.dtype);
  const std::string at = where(path_, entry.name);
  if (info == nullptr) throw InvalidArgument(at + ": unknown dtype '" + entry.dtype + "'");
  DType target;
  if (floating) {
    if (!is_floating(*floating)) {
      throw InvalidArgument(at + ": the conversion target " + std::string(dtype_name(*floating)) +
                            " is not a floating dtype (f32, f64 or bf16)");
    }
    target = info->family == DTypeInfo::floating ? *floating : DType::i64;
  } else {
    const std::string_view n = entry.dtype;
    if (n == "F32") target = DType::f32;
    else if (n == "F64") target = DType::f64;
    else if (n == "BF16") target = DType::bf16;
    else if (n == "I64") target = DType::i64;
    else {
      throw InvalidArgument(at + ": its dtype " + entry.dtype +
                            " has no tessera dtype; convert it (tessera-ckpt import --dtype f32: floating "
                            "tensors to f32, integers to i64)");
    }
  }

  std::ifstream in(path_, std::ios::binary);
  if (!in) throw IoError(at + ": cannot open the file: " + std::strerror(errno));
  const std::string bytes = read_exactly(in, data_start_ + entry.begin, entry.end - entry.begin, at);
  Tensor out = Tensor::empty(entry.shape, target);
  const auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto n = static_cast<std::size_t>(out.numel());
  if (safetensors_dtype_name(target) == entry.dtype) {
    if (n != 0) std::memcpy(out.data(), src, bytes.size());
    check_finite(out, at);
    return out;
  }
  switch (target) {
    case DType::f32: {
      auto* dst = out.data<float>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(floating_at(*info, src, i));
      break;
    }
    case DType::f64: {
      auto* dst = out.data<double>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = floating_at(*info, src, i);
      break;
    }
    case DType::bf16: {
      auto* dst = out.data<bfloat16>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = bfloat16(static_cast<float>(floating_at(*info, src, i)));
      break;
    }
    case DType::i64: {
      auto* dst = out.data<std::int64_t>();
      bool fits = true;
      for (std::size_t i = 0; i < n; ++i) dst[i] = integer_at(*info, src, i, fits);
      if (!fits) throw InvalidArgument(at + ": a U64 value does not fit in i64");
      break;
    }
  }
  check_finite(out, at);
  return out;
}

namespace {

// Writes all of [data, data + size) to fd; IoError naming `path` and the reason.
void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, std::size_t(1) << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("cannot write '" + path + "': " + std::strerror(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Everything is checked and the header built before a file is created. The file is
  // renamed into place: a device or FIFO of that name would be replaced.
  tessera::detail::require_replaceable_file(path, "safetensors output");
  std::set<std::string> names;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      header += (it == metadata.begin() ? "" : ",") + detail::json_quote(it->first) + ":" +
                detail::json_quote(it->second);
    }
    header += "}";
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__" || holds_nul(name)) {
      throw InvalidArgument("write_safetensors '" + path + "': '" + printable(name) + "' cannot name a tensor");
    }
    if (!names.insert(name).second) {
      throw InvalidArgument("write_safetensors '" + path + "': the tensor name '" + name + "' is given twice");
    }
    if (!t.defined()) throw InvalidArgument("write_safetensors '" + path + "': tensor '" + name + "' is undefined");
    const std::uint64_t end = offset + t.nbytes();
    header += (header.size() > 1 ? "," : "") + detail::json_quote(name) + ":{\"dtype\":\"" +
              std::string(safetensors_dtype_name(t.dtype())) + "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape().size(); ++d) header += (d ? "," : "") + std::to_string(t.shape()[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  // A temporary name in the same directory (so the rename is atomic), unique per process
  // and call.
  const auto nonce = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(nonce);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create '" + temporary + "': " + std::strerror(errno));
  bool fd_open = true;
  try {
    unsigned char length[8];
    const std::uint64_t header_size = header.size();
    std::memcpy(length, &header_size, 8);
    write_all(fd, length, 8, temporary);
    write_all(fd, header.data(), header.size(), temporary);
    for (const auto& [name, t] : tensors) {
      (void)name;
      const Tensor host = t.to(Device::host()).contiguous();
      if (host.numel() != 0) write_all(fd, host.data(), host.nbytes(), temporary);
    }
    if (::fsync(fd) != 0) throw IoError("fsync of '" + temporary + "' failed: " + std::strerror(errno));
    fd_open = false;
    if (::close(fd) != 0) throw IoError("cannot close '" + temporary + "': " + std::strerror(errno));
  } catch (...) {
    if (fd_open) ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  try {
    detail::rename_path(temporary, path);
    const std::string dir = std::filesystem::path(path).parent_path().string();
    detail::fsync_path(dir.empty() ? "." : dir, /*directory=*/true);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

}  // namespace tessera::io
