#pragma once
// NumPy's .npz: a zip archive of .npy files, here stored uncompressed (what numpy.savez
// writes), so numpy.load reads it by key. Below 4 GiB (no zip64).

#include <map>
#include <string>

#include "tessera/tensor.hpp"

namespace tessera::onnx_tool {

// The CRC-32 (IEEE 802.3 polynomial) zip records for each entry.
std::uint32_t crc32(const std::string& bytes);

// Writes `arrays` as `path`: entry "<key>.npy" per array, so numpy.load(path)[key].
void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays);

}  // namespace tessera::onnx_tool
