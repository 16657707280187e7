#pragma once
// What the tessera halves of the PyTorch parity checks share (tests/checkpoint/pytorch_parity.cpp,
// tests/models/decoder_gqa_parity.cpp; tests/python/check_pytorch.py writes their inputs):
// a named tensor of the safetensors file PyTorch wrote, and how far tessera's result is
// from PyTorch's.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "tessera/error.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/tensor.hpp"

namespace tessera::testing {

// The tensor `name` of `file` (floating tensors converted to `floating` when given);
// IoError naming the file when it has none.
inline Tensor read_named(const io::SafetensorsFile& file, const std::string& name,
                         std::optional<DType> floating = std::nullopt) {
  const io::SafetensorsEntry* e = file.find(name);
  if (e == nullptr) throw IoError(file.path() + " has no tensor '" + name + "'");
  return file.read(*e, floating);
}

// max |got - want| (infinite where a difference is NaN) and max |want| over two f32
// tensors; a ShapeError naming `what` when their shapes differ.
inline std::pair<double, double> difference_and_scale(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.shape() != want.shape()) throw ShapeError(what + ": tessera gives " + got.str() + ", PyTorch " + want.str());
  const auto a = got.contiguous().to_vector<float>(), b = want.contiguous().to_vector<float>();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return {diff, scale};
}

}  // namespace tessera::testing
