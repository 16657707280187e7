#pragma once
// Sliding windows over any number of spatial dims: the one geometry the ONNX convolutions
// (Conv, ConvTranspose) and poolings (MaxPool, AveragePool) share.
//
// The compute interface's im2col (backend/kernel_math.hpp) covers 2-D only; ONNX files also
// carry 1-D and 3-D convolutions and poolings, so the ONNX layer resolves every window once
// into a table of source offsets (window_sources) that im2col, col2im and the poolings read.
// The table is built per forward and reused for every sample and channel.

#include <cstdint>
#include <utility>
#include <vector>

#include "onnx/op.hpp"

namespace tessera::onnx {

// A window of `kernel` taps (spaced by `dilation`) placed at every position of `out`
// (spaced by `stride`) over a field of extent `in`, starting `pad_begin` before it.
// Taps outside [0, in) read padding. pad_end is the explicit end padding the file gave
// (AveragePool counts it with count_include_pad; ceil_mode may place windows past it).
struct WindowGeometry {
  Shape in, kernel, stride, dilation, pad_begin, pad_end, out;

  std::size_t rank() const { return in.size(); }
  std::int64_t field_size() const { return shape_numel(in); }
  std::int64_t taps() const { return shape_numel(kernel); }
  std::int64_t positions() const { return shape_numel(out); }
  bool operator==(const WindowGeometry&) const = default;
  // Every window is one element at its own position (1x1 kernel, stride 1, no padding):
  // im2col is the identity.
  bool is_pointwise() const;
};

// The window geometry of a Conv, MaxPool or AveragePool node over the field `in` with
// `kernel`: strides, dilations, pads and auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER)
// from its attributes; the output extent rounds down, or up with `ceil_mode` (a window
// that would start in the end padding is dropped, as PyTorch and ONNX Runtime do).
WindowGeometry window_geometry(const NodeSpec& node, const Shape& in, const Shape& kernel, bool ceil_mode);

// For tap k and position p, the offset in one channel's field that the window reads, or
// -1 in the padding; row-major [taps, positions].
std::vector<std::int64_t> window_sources(const WindowGeometry& g);

// The window_sources of the geometry an op last ran with, rebuilt only when it changes:
// a training loop runs every op at one shape, and a large field's table is megabytes.
class WindowTable {
 public:
  const std::vector<std::int64_t>& of(const WindowGeometry& g);

 private:
  WindowGeometry geometry_;
  std::vector<std::int64_t> sources_;
  bool built_ = false;
};

// cols[c, k, q] = x[c, sources[k, begin + q]] (0 in the padding) for `channels` fields
// of x and the `count` positions from `begin`: one chunk of the column matrix.
template <class T>
void im2col_nd(const T* x, std::int64_t channels, const WindowGeometry& g, const std::vector<std::int64_t>& sources,
               std::int64_t begin, std::int64_t count, T* cols);
// The adjoint: x[c, sources[k, begin + q]] += cols[c, k, q].
template <class T>
void col2im_add_nd(const T* cols, std::int64_t channels, const WindowGeometry& g,
                   const std::vector<std::int64_t>& sources, std::int64_t begin, std::int64_t count, T* x);

// The most elements a chunk of the column matrix holds (4 Mi by default: 16 MiB in
// f32); the convolutions split a sample's positions to stay within it. Settable for
// tests that exercise the chunking on small fields.
std::int64_t im2col_chunk_elements() noexcept;
void set_im2col_chunk_elements(std::int64_t elements);

// Calls f(T{}) with T = float or double after the tensor dtype (f32, f64), so that every
// kernel runs in its input's own precision from one template.
template <class F>
decltype(auto) visit_floating(DType dtype, F&& f) {
  if (dtype == DType::f32) return std::forward<F>(f)(float{});
  return std::forward<F>(f)(double{});
}

// The tensor of a floating input; UnsupportedError naming the node and the element type
// for an integer one (the integer forms, e.g. ConvInteger's, are other ops).
const Tensor& floating_input(const NodeSpec& node, const Value& value, const char* what);

}  // namespace tessera::onnx
