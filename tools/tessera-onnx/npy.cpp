// .npy read and write (npy.hpp). The header is a Python dict literal; only the three keys
// numpy writes are read, each checked, and the data's size is checked against the shape
// before any allocation.
#include "npy.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessera/detail/checked_math.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx_tool {

namespace {

const std::string kMagic = "\x93NUMPY";

struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// The text after "'key':" in the header dict, spaces skipped.
std::string::size_type value_start(const std::string& dict, const std::string& key, const std::string& where) {
  const std::string::size_type at = dict.find("'" + key + "'");
  if (at == std::string::npos) throw InvalidArgument(where + ": the .npy header has no '" + key + "'");
  std::string::size_type pos = dict.find(':', at);
  if (pos == std::string::npos) throw InvalidArgument(where + ": the .npy header is malformed at '" + key + "'");
  ++pos;
  while (pos < dict.size() && dict[pos] == ' ') ++pos;
  return pos;
}

Shape parse_shape(const std::string& dict, const std::string& where) {
  std::string::size_type pos = value_start(dict, "shape", where);
  const std::string::size_type close = dict.find(')', pos);
  if (pos >= dict.size() || dict[pos] != '(' || close == std::string::npos) {
    throw InvalidArgument(where + ": the .npy header's shape is not a tuple");
  }
  Shape shape;
  std::stringstream items(dict.substr(pos + 1, close - pos - 1));
  for (std::string item; std::getline(items, item, ',');) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;  // the trailing comma of (n,)
    std::int64_t extent = -1;
    std::size_t used = 0;
    try {
      extent = std::stoll(item.substr(first), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || extent < 0) throw InvalidArgument(where + ": the .npy shape has the bad extent '" + item + "'");
    shape.push_back(extent);
  }
  return shape;
}

Header parse_header(const std::string& dict, const std::string& where) {
  Header h;
  std::string::size_type pos = value_start(dict, "descr", where);
  const std::string::size_type end = dict.find('\'', pos + 1);
  if (pos >= dict.size() || dict[pos] != '\'' || end == std::string::npos) {
    throw InvalidArgument(where + ": the .npy header's descr is not a string");
  }
  h.descr = dict.substr(pos + 1, end - pos - 1);
  pos = value_start(dict, "fortran_order", where);
  h.fortran_order = dict.compare(pos, 4, "True") == 0;
  if (!h.fortran_order && dict.compare(pos, 5, "False") != 0) {
    throw InvalidArgument(where + ": the .npy header's fortran_order is neither True nor False");
  }
  h.shape = parse_shape(dict, where);
  return h;
}

DType dtype_of_descr(const std::string& descr, const std::string& where) {
  if (descr == "<f4") return DType::f32;
  if (descr == "<f8") return DType::f64;
  throw UnsupportedError(where + " holds '" + descr +
                         "' elements; tessera-onnx reads little-endian float32 (<f4) and float64 (<f8) arrays");
}

std::uint32_t read_le(const std::string& bytes, std::size_t at, std::size_t width) {
  std::uint32_t v = 0;
  for (std::size_t k = 0; k < width; ++k) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + k])) << (8 * k);
  return v;
}

// Python's tuple literal: "()", "(3,)", "(2, 3)".
std::string shape_tuple(const Shape& shape) {
  std::string out = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

}  // namespace

Tensor read_npy(const std::string& path) {
  const std::string where = "'" + path + "'";
  const std::string bytes = detail::read_regular_file(path, "the .npy file");
  if (bytes.size() < 10 || bytes.compare(0, kMagic.size(), kMagic) != 0) {
    throw InvalidArgument(where + " is not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const std::size_t width = major == 1 ? 2 : 4;
  if ((major != 1 && major != 2 && major != 3) || bytes.size() < 8 + width) {
    throw InvalidArgument(where + ": unknown .npy version " + std::to_string(major));
  }
  const std::size_t header_len = read_le(bytes, 8, width);
  const std::size_t data_at = 8 + width + header_len;
  if (data_at > bytes.size()) throw InvalidArgument(where + ": the .npy header runs past the end of the file");
  const Header h = parse_header(bytes.substr(8 + width, header_len), where);
  if (h.fortran_order) throw UnsupportedError(where + " is in Fortran order; save a C-ordered array (numpy.ascontiguousarray)");
  const DType dtype = dtype_of_descr(h.descr, where);
  const std::int64_t numel = detail::checked_numel(h.shape, where);
  const std::int64_t nbytes = detail::checked_mul(numel, static_cast<std::int64_t>(dtype_size(dtype)), where);
  if (static_cast<std::int64_t>(bytes.size() - data_at) != nbytes) {
    throw InvalidArgument(where + " has " + std::to_string(bytes.size() - data_at) + " bytes of data where its shape " +
                          shape_str(h.shape) + " needs " + std::to_string(nbytes));
  }
  Tensor t = Tensor::empty(h.shape, dtype);
  if (nbytes > 0) std::memcpy(t.data(), bytes.data() + data_at, static_cast<std::size_t>(nbytes));
  return t;
}

std::string npy_bytes(const Tensor& tensor) {
  if (tensor.dtype() != DType::f32 && tensor.dtype() != DType::f64) {
    throw InvalidArgument("write_npy: only f32 and f64 tensors are written, got " + tensor.str());
  }
  std::string dict = "{'descr': '" + std::string(tensor.dtype() == DType::f32 ? "<f4" : "<f8") +
                     "', 'fortran_order': False, 'shape': " + shape_tuple(tensor.shape()) + ", }";
  // Padded with spaces and a newline so the data starts on a 64-byte boundary.
  const std::size_t unpadded = kMagic.size() + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out = kMagic;
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  const Tensor host = tensor.to(Device::host()).contiguous();
  out.append(static_cast<const char*>(host.data()), host.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string bytes = npy_bytes(tensor);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw IoError("could not write '" + path + "'");
}

}  // namespace tessera::onnx_tool
