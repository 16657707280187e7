#pragma once
// A value flowing along an edge of an imported ONNX graph.
//
// Floating tensors (f32, f64) are tessera Tensors of their own dtype: they are what the
// graph computes and differentiates. Integer and boolean tensors (shapes, indices, masks)
// travel in i64 storage with the ONNX element type the file declared kept beside, so
// Cast, Where and the shape ops see the type the file meant without a dtype per ONNX type
// in tessera's core. Every Value lives on the host and is contiguous.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::onnx {

// The ONNX element types tessera runs (TensorProto.DataType; the others are refused by
// name where a file declares them).
enum class ElementType : std::uint8_t { f32, f64, i64, i32, i16, i8, u8, boolean };

std::string_view element_type_name(ElementType type) noexcept;  // "float", "int64", "bool", ...
bool is_floating(ElementType type) noexcept;
// The tessera dtype a value of `type` is stored in (f32, f64 or i64).
DType storage_dtype(ElementType type) noexcept;
// ONNX's TensorProto.DataType number of `type` (FLOAT = 1, INT64 = 7, BOOL = 9, ...).
int onnx_data_type(ElementType type) noexcept;

struct Value {
  Tensor tensor;
  ElementType type = ElementType::f32;

  bool defined() const { return tensor.defined(); }
  const Shape& shape() const { return tensor.shape(); }
  std::int64_t numel() const { return tensor.numel(); }

  // A floating value (the tensor's dtype must be f32 or f64).
  static Value floating(Tensor tensor);
  // An integer or boolean value from its elements (booleans as 0/1).
  static Value integers(const std::vector<std::int64_t>& elements, const Shape& shape,
                        ElementType type = ElementType::i64);
  // The elements of an integer or boolean value (InvalidArgument naming `what` for a
  // floating one).
  std::vector<std::int64_t> to_ints(std::string_view what) const;
  // "float[1, 3, 8, 8]".
  std::string str() const;
};

}  // namespace tessera::onnx
