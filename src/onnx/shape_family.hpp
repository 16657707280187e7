#pragma once
// What the shape ops share (ops_shape.cpp, ops_constant.cpp): moving elements of any
// storage (f32, f64, i64) by an index map, the argument checks (axes, integer inputs,
// counts that must not overflow) and the family's base classes. Private to src/onnx.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "onnx/broadcast.hpp"
#include "onnx/op.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::shape_family {

using Indices = std::vector<std::int64_t>;

// ---- Elements of any storage ----------------------------------------------------------

// Calls `f` with a null pointer of the element type `dtype` stores, so one template body
// moves f32, f64 and i64 (integer and bool values) alike.
template <class F>
inline void visit_storage(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(static_cast<float*>(nullptr)); return;
    case DType::f64: f(static_cast<double*>(nullptr)); return;
    case DType::i64: f(static_cast<std::int64_t*>(nullptr)); return;
    case DType::bf16: break;
  }
  throw InternalError("onnx shape ops: a value stored as " + std::string(dtype_name(dtype)));
}

template <class P>
using element_of = std::remove_pointer_t<P>;

inline Value typed(Tensor tensor, ElementType type) {
  Value v;
  v.tensor = std::move(tensor);
  v.type = type;
  return v;
}

// out[i] = in[source[i]], `out` of `shape`.
inline Tensor gather_flat(const Tensor& in, const Indices& source, const Shape& shape) {
  Tensor out = Tensor::empty(shape, in.dtype());
  visit_storage(in.dtype(), [&](auto tag) {
    using T = element_of<decltype(tag)>;
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    for (std::size_t i = 0; i < source.size(); ++i) dst[i] = src[source[i]];
  });
  return out;
}

// gather_flat's adjoint: result[source[i]] += grad[i], `result` of `shape`.
inline Tensor scatter_add_flat(const Tensor& grad, const Indices& source, const Shape& shape) {
  Tensor result = Tensor::zeros(shape, grad.dtype());
  const Tensor g = grad.contiguous();
  visit_storage(g.dtype(), [&](auto tag) {
    using T = element_of<decltype(tag)>;
    const T* src = g.data<T>();
    T* dst = result.data<T>();
    for (std::size_t i = 0; i < source.size(); ++i) dst[source[i]] += src[i];
  });
  return result;
}

// ---- Arguments ------------------------------------------------------------------------

inline const Value& input(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index) {
  if (index >= inputs.size() || !inputs[index].defined()) {
    node.invalid("input " + std::to_string(index) + " is missing");
  }
  return inputs[index];
}

inline bool has_input(const std::vector<Value>& inputs, std::size_t index) {
  return index < inputs.size() && inputs[index].defined();
}

// The elements of an integer input (shapes, axes, indices), named by what they are.
inline Indices int_input(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index, const char* what) {
  return input(node, inputs, index).to_ints(node.where() + ": " + what);
}

// `axis` in [-rank, rank) made non-negative (`rank` + 1 values for the ops that insert).
inline std::int64_t normalize_axis(const NodeSpec& node, std::int64_t axis, std::int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    node.invalid(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// The element count of `shape`; InvalidArgument naming the node and `what` when it
// overflows int64 (a hostile file's shapes must not wrap around).
inline std::int64_t count_of(const NodeSpec& node, const Shape& shape, const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n))
      node.invalid(what + " " + shape_str(shape) + " has more elements than int64 counts");
  }
  return n;
}

// The attribute `axis` of a value of shape `in`, as an index.
inline std::size_t axis_of(const NodeSpec& node, std::int64_t axis, const Shape& in) {
  return static_cast<std::size_t>(normalize_axis(node, axis, static_cast<std::int64_t>(in.size()), "axis"));
}

inline Indices normalize_axes(const NodeSpec& node, const Indices& axes, std::int64_t rank, const char* what) {
  Indices out;
  for (std::int64_t a : axes) {
    const std::int64_t k = normalize_axis(node, a, rank, what);
    if (std::find(out.begin(), out.end(), k) != out.end()) {
      node.invalid(std::string(what) + " repeat " + shape_str(axes));
    }
    out.push_back(k);
  }
  return out;
}

inline std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  return shape_numel(
      Shape(shape.begin() + static_cast<std::ptrdiff_t>(begin), shape.begin() + static_cast<std::ptrdiff_t>(end)));
}

// An argument that ONNX moved from an attribute to an input at `input_from` (Squeeze's and
// Unsqueeze's axes, Split's split: opset 13): checked when the op is made, so a file that
// mixes the two forms is refused by name instead of having one of them ignored.
inline void check_moved_argument(const NodeSpec& node, const std::string& name, std::size_t input_index, int input_from) {
  const bool as_input = node.inputs.size() > input_index && !node.inputs[input_index].empty();
  if (node.opset >= input_from && node.has(name)) {
    node.unsupported("the attribute '" + name + "' (an input from opset " + std::to_string(input_from) + ")");
  }
  if (node.opset < input_from && as_input) {
    node.unsupported("'" + name + "' as an input (an attribute before opset " + std::to_string(input_from) + ")");
  }
}

// Its value, whichever form the opset uses; nullopt when absent.
inline std::optional<Indices> moved_argument(const NodeSpec& node, const std::vector<Value>& inputs, const std::string& name,
                                      std::size_t input_index, int input_from) {
  if (node.opset >= input_from) {
    if (!has_input(inputs, input_index)) return std::nullopt;
    return int_input(node, inputs, input_index, name.c_str());
  }
  if (!node.has(name)) return std::nullopt;
  return node.get_ints(name);
}

// ---- The family's base ----------------------------------------------------------------

// Remembers its inputs' shapes and element types in forward, so backward can shape the
// gradients and give none to integer inputs; the first input is the only one a gradient
// flows to (the others are shapes, axes, indices).
class ShapeFamilyOp : public Op {
 public:
  using Op::Op;
  bool differentiable_input(std::size_t index) const override { return index == 0; }

 protected:
  void remember(const std::vector<Value>& inputs) {
    shapes_.clear();
    types_.clear();
    for (const Value& v : inputs) {
      shapes_.push_back(v.defined() ? v.shape() : Shape{});
      types_.push_back(v.type);
    }
  }
  bool floating_input(std::size_t index) const {
    return index < types_.size() && is_floating(types_[index]) && differentiable_input(index);
  }
  // grad_outputs[index], or zeros shaped like `shape` when undefined (an unused output).
  Tensor grad_or_zeros(const std::vector<Tensor>& grad_outputs, std::size_t index, const Shape& shape) const {
    if (index < grad_outputs.size() && grad_outputs[index].defined()) return grad_outputs[index].contiguous();
    return Tensor::zeros(shape, storage_dtype(types_.at(0)));
  }
  // One gradient per input, `first` for input 0 when it is floating, undefined elsewhere.
  std::vector<Tensor> first_only(Tensor first) const {
    std::vector<Tensor> grads(types_.size());
    if (floating_input(0)) grads[0] = std::move(first);
    return grads;
  }

  std::vector<Shape> shapes_;
  std::vector<ElementType> types_;
};

// An op whose outputs do not depend differentiably on its inputs (Shape, Size, Constant,
// ConstantOfShape, Range): backward gives every input an undefined gradient.
class NoGradientOp : public ShapeFamilyOp {
 public:
  using ShapeFamilyOp::ShapeFamilyOp;
  bool differentiable_input(std::size_t) const override { return false; }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override { return std::vector<Tensor>(types_.size()); }
};

}  // namespace tessera::onnx::shape_family
