#pragma once
// What the op families share to compute on a Value's elements: the one dispatch from an
// ONNX element type to the C++ type its storage holds (float, double or int64), the
// conversion between element types (Cast's semantics, also used where an op mixes types),
// and the input checks every factory and forward makes. Private to src/onnx.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "onnx/op.hpp"

namespace tessera::onnx::detail {

template <class T>
struct Tag {
  using type = T;
};

// Calls body(Tag<T>{}) with T the storage type of `type`: float, double, or std::int64_t
// for the integer and boolean types when `Integers`; an integer or boolean value where the
// op has no integer form is refused naming the node and the type.
template <bool Integers, class Body>
decltype(auto) dispatch(const NodeSpec& node, ElementType type, Body&& body) {
  if (type == ElementType::f32) return body(Tag<float>{});
  if (type == ElementType::f64) return body(Tag<double>{});
  if constexpr (Integers) {
    return body(Tag<std::int64_t>{});
  } else {
    node.unsupported("an input of type " + std::string(element_type_name(type)));
  }
}

// A tensor of `shape` and dtype of T with its elements from `fill(i)`.
template <class T, class Fill>
Tensor tensor_from(const Shape& shape, Fill&& fill) {
  Tensor t = Tensor::empty(shape, dtype_of<T>);
  T* p = t.data<T>();
  for (std::int64_t i = 0, i_end = t.numel(); i < i_end; ++i) p[i] = fill(i);
  return t;
}

// `v` wrapped to the width of the integer `type` (two's complement, as the C++ type of that
// width converts), or 0/1 for bool: integer arithmetic and Cast keep a declared int8 an int8.
inline std::int64_t wrap_integer(ElementType type, std::int64_t v) {
  switch (type) {
    case ElementType::i32: return static_cast<std::int32_t>(v);
    case ElementType::i16: return static_cast<std::int16_t>(v);
    case ElementType::i8: return static_cast<std::int8_t>(v);
    case ElementType::u8: return static_cast<std::uint8_t>(v);
    case ElementType::boolean: return v != 0 ? 1 : 0;
    default: return v;
  }
}

// One element of storage type S as ONNX's Cast to `to` (storage D) makes it: to bool is
// "!= 0"; floating to integer truncates toward zero (saturating at int64's range, NaN to 0:
// ONNX leaves out-of-range values undefined, C++ would make them undefined behaviour);
// integer to integer wraps to the destination's width; to floating is a plain conversion.
template <class D, class S>
D convert_element(S x, ElementType to) {
  if (to == ElementType::boolean) return static_cast<D>(x != S(0) ? 1 : 0);
  if constexpr (std::is_integral_v<D>) {
    std::int64_t i = 0;
    if constexpr (std::is_floating_point_v<S>) {
      if (x != x) {
        i = 0;
      } else if (x >= S(9.2233720368547758e18)) {
        i = INT64_MAX;
      } else if (x <= S(-9.2233720368547758e18)) {
        i = INT64_MIN;
      } else {
        i = static_cast<std::int64_t>(x);
      }
    } else {
      i = static_cast<std::int64_t>(x);
    }
    return wrap_integer(to, i);
  } else {
    return static_cast<D>(x);
  }
}

// A value of `shape` and element type `type` for an op to fill: uninitialised (every
// caller writes every element; zero-filling first was a tenth of a small model's time).
inline Value make_value(const Shape& shape, ElementType type) {
  Value v;
  v.type = type;
  v.tensor = Tensor::empty(shape, storage_dtype(type));
  return v;
}

// `v` converted to element type `to` (a new value; `v` itself when the type is already `to`).
inline Value convert(const NodeSpec& node, const Value& v, ElementType to) {
  if (v.type == to) return v;
  Value out = make_value(v.shape(), to);
  dispatch<true>(node, v.type, [&](auto source) {
    using S = typename decltype(source)::type;
    dispatch<true>(node, to, [&](auto dest) {
      using D = typename decltype(dest)::type;
      const S* in = v.tensor.data<S>();
      D* o = out.tensor.data<D>();
      for (std::int64_t i = 0; i < v.numel(); ++i) o[i] = convert_element<D>(in[i], to);
    });
  });
  return out;
}

// The elements of `v` as T (converted as Cast converts).
template <class T>
std::vector<T> elements_as(const NodeSpec& node, const Value& v) {
  std::vector<T> out(static_cast<std::size_t>(v.numel()));
  dispatch<true>(node, v.type, [&](auto source) {
    using S = typename decltype(source)::type;
    const S* in = v.tensor.data<S>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(in[i]);
  });
  return out;
}

// The node names between `min` and `max` inputs (trailing optional ones may be omitted).
inline void check_input_count(const NodeSpec& node, std::size_t min, std::size_t max) {
  const std::size_t n = node.inputs.size();
  if (n < min || n > max) {
    node.invalid("expects " + (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
                 " inputs, the node has " + std::to_string(n));
  }
}

// Input `index`, which must be given.
inline const Value& required_input(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index) {
  if (index >= inputs.size() || !inputs[index].defined()) {
    node.invalid("input " + std::to_string(index) + " is required");
  }
  return inputs[index];
}

// Input `index` when given (nullptr for an omitted optional input).
inline const Value* optional_input(const std::vector<Value>& inputs, std::size_t index) {
  return index < inputs.size() && inputs[index].defined() ? &inputs[index] : nullptr;
}

// Two inputs whose element types must agree (ONNX's single type parameter T).
inline void check_same_type(const NodeSpec& node, const Value& a, const Value& b) {
  if (a.type != b.type) {
    node.invalid("input types " + std::string(element_type_name(a.type)) + " and " +
                 std::string(element_type_name(b.type)) + " differ");
  }
}

}  // namespace tessera::onnx::detail
