#pragma once
// NumPy's .npy format for tessera-onnx: f32 and f64 arrays, little-endian, C order (what
// numpy.save writes for float32/float64 arrays on every common machine). Anything else
// (Fortran order, another dtype, big-endian) is refused naming the file and the dtype.

#include <string>

#include "tessera/tensor.hpp"

namespace tessera::onnx_tool {

Tensor read_npy(const std::string& path);
// The .npy bytes of `tensor` (f32 or f64, any device), for a file or a zip entry.
std::string npy_bytes(const Tensor& tensor);
void write_npy(const std::string& path, const Tensor& tensor);

}  // namespace tessera::onnx_tool
