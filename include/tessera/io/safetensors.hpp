#pragma once
// safetensors files: the weight format of the PyTorch ecosystem, read and written
// natively (no Python). A file is
//
//   8 bytes   N, the header length (unsigned 64-bit little-endian)
//   N bytes   a JSON object: {"__metadata__": {"k": "v", ...},            (optional)
//                             "<name>": {"dtype": "F32", "shape": [2, 3],
//                                        "data_offsets": [begin, end]}, ...}
//   the rest  the tensors' bytes, little-endian, C order; [begin, end) is relative to
//             the start of this section
//
// The reader checks the header before any tensor is read: every entry's byte count is
// its shape times its dtype's size, the entries tile the data section exactly (no
// overlap, no gap, nothing past the end of the file), and every error names the file
// and the tensor at fault. tessera-ckpt import and export are built on it (with
// io/weight_mapping.hpp); docs/pytorch.md is the user guide.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as the header spells it: "F32", "BF16", "I64", ...
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // byte range in the data section
};

// Bytes per element of a safetensors dtype name (F64, F32, F16, BF16, I64, I32, I16, I8,
// U64, U32, U16, U8, BOOL); 0 for a name tessera does not know.
std::size_t safetensors_dtype_size(std::string_view dtype) noexcept;
// The safetensors name of a tessera dtype: "F32", "F64", "BF16", "I64".
std::string_view safetensors_dtype_name(DType dtype) noexcept;

class SafetensorsFile {
 public:
  // Reads and checks the header (not the tensors). IoError naming the file and, where
  // one is at fault, the tensor.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  // The tensors in the order of their bytes in the file.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor as a contiguous host tensor. Without `floating`: F32, F64, BF16 and I64
  // keep their type, and any other dtype is an InvalidArgument naming the file, the
  // tensor and its dtype. With `floating` (f32, f64 or bf16): every floating tensor, F16
  // and BF16 included, converts to it (rounded once to nearest; to bf16 through float),
  // and every integer or BOOL tensor becomes i64.
  Tensor read(const SafetensorsEntry& entry, std::optional<DType> floating = std::nullopt) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;  // 8 + N
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (f32, f64, bf16 or i64; any device, copied to the host) in this
// order, and `metadata` as "__metadata__". The header is padded with spaces to a
// multiple of 8 bytes, so every tensor's bytes start 8-byte aligned. The file is written
// under a temporary name beside `path`, fsynced and renamed: `path` is complete or
// untouched. A name given twice, or an empty name, is an InvalidArgument.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera::io
