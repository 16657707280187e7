#pragma once
// Numpy-style (multidirectional) broadcasting, ONNX's rule for the arithmetic ops, Where
// and Expand, and its adjoint: a gradient summed back to an input's shape.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::onnx {

// The broadcast shape of `a` and `b` (aligned on the right; a dimension of 1 stretches);
// InvalidArgument naming `where` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& where);

// For each element of `out` (row-major), base + sum_k coord[k] * strides[k]: the input
// offsets of a strided walk over `out` (a stride 0 repeats: broadcasting; Transpose
// permutes strides, Slice scales and offsets them). The one index walk of the ops that
// copy elements by position.
std::vector<std::int64_t> strided_source(const Shape& out, const std::vector<std::int64_t>& strides,
                                         std::int64_t base = 0);

// For each element of `out` (row-major), the index of the element of an input of shape
// `in` that it reads (`in` must broadcast to `out`).
std::vector<std::int64_t> broadcast_source_index(const Shape& in, const Shape& out);

// Sums `grad` (of the broadcast shape) back to `shape`: the gradient of the input that
// was broadcast. f32 or f64; returns a new contiguous tensor.
Tensor reduce_to_shape(const Tensor& grad, const Shape& shape);

}  // namespace tessera::onnx
