#include "onnx/value.hpp"

#include <sstream>

#include "tessera/error.hpp"

namespace tessera::onnx {

std::string_view element_type_name(ElementType type) noexcept {
  switch (type) {
    case ElementType::f32: return "float";
    case ElementType::f64: return "double";
    case ElementType::i64: return "int64";
    case ElementType::i32: return "int32";
    case ElementType::i16: return "int16";
    case ElementType::i8: return "int8";
    case ElementType::u8: return "uint8";
    case ElementType::boolean: return "bool";
  }
  return "unknown";
}

bool is_floating(ElementType type) noexcept {
  return type == ElementType::f32 || type == ElementType::f64;
}

DType storage_dtype(ElementType type) noexcept {
  if (type == ElementType::f32) return DType::f32;
  if (type == ElementType::f64) return DType::f64;
  return DType::i64;
}

int onnx_data_type(ElementType type) noexcept {
  switch (type) {
    case ElementType::f32: return 1;
    case ElementType::u8: return 2;
    case ElementType::i8: return 3;
    case ElementType::i16: return 5;
    case ElementType::i32: return 6;
    case ElementType::i64: return 7;
    case ElementType::boolean: return 9;
    case ElementType::f64: return 11;
  }
  return 0;
}

Value Value::floating(Tensor tensor) {
  if (!tensor.defined() || !tessera::is_floating(tensor.dtype()) || tensor.dtype() == DType::bf16) {
    throw InvalidArgument("onnx::Value::floating: expected an f32 or f64 tensor, got " +
                          (tensor.defined() ? tensor.str() : std::string("an undefined tensor")));
  }
  Value value;
  value.type = tensor.dtype() == DType::f32 ? ElementType::f32 : ElementType::f64;
  value.tensor = tensor.is_contiguous() ? std::move(tensor) : tensor.contiguous();
  return value;
}

Value Value::integers(const std::vector<std::int64_t>& elements, const Shape& shape, ElementType type) {
  if (is_floating(type)) {
    throw InvalidArgument("onnx::Value::integers: element type " + std::string(element_type_name(type)) +
                          " is floating");
  }
  Value value;
  value.type = type;
  value.tensor = Tensor::from_vector(elements, shape);
  return value;
}

std::vector<std::int64_t> Value::to_ints(std::string_view what) const {
  if (!defined() || is_floating(type)) {
    throw InvalidArgument(std::string(what) + ": expected an integer tensor, got " +
                          (defined() ? str() : std::string("nothing")));
  }
  return tensor.to_vector<std::int64_t>();
}

std::string Value::str() const {
  std::ostringstream out;
  out << element_type_name(type) << shape_str(defined() ? shape() : Shape{});
  return out.str();
}

}  // namespace tessera::onnx
