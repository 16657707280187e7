// The ONNX pooling, padding and resampling ops: MaxPool, AveragePool, GlobalAveragePool,
// GlobalMaxPool, Pad, Resize, Upsample.
//
// Each reduces to one gather that backward runs in reverse:
//   - pooling reads the sliding windows of im2col_nd.hpp (the Conv geometry), MaxPool
//     routing its gradient to each window's argmax, AveragePool spreading it evenly;
//   - Pad maps every output element to the input element it copies (or to the constant),
//     so its gradient crops and, for reflect/edge/wrap, adds the copies back;
//   - Resize and Upsample interpolate one axis at a time (nearest and linear are
//     separable), each pass a small weighted gather whose adjoint is the scatter.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "onnx/im2col_nd.hpp"
#include "onnx/op.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx {

namespace {

void check_input_count(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t lo, std::size_t hi) {
  if (inputs.size() < lo || inputs.size() > hi) {
    node.invalid("expected " + std::to_string(lo) + (lo == hi ? "" : " to " + std::to_string(hi)) + " inputs, got " +
                 std::to_string(inputs.size()));
  }
}

bool output_requested(const NodeSpec& node, std::size_t index) {
  return node.outputs.size() > index && !node.outputs[index].empty();
}

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }

// ---- Pooling: X [N, C, spatial...] through windows; every channel plane alike.

enum class PoolKind { max, average };

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// One window over the whole field: the global poolings.
WindowGeometry whole_field(const Shape& field) {
  WindowGeometry g;
  g.in = field;
  g.kernel = field;
  g.stride = g.dilation = g.out = Shape(field.size(), 1);
  g.pad_begin = g.pad_end = Shape(field.size(), 0);
  return g;
}

class PoolOp final : public Op {
 public:
  PoolOp(const NodeSpec& node, PoolKind kind, bool global) : Op(node), kind_(kind), global_(global) {
    if (global) return;
    column_major_ = node.get_int("storage_order", 0) != 0;
    kernel_ = node.require_ints("kernel_shape");
    ceil_mode_ = node.get_int("ceil_mode", 0) != 0;
    count_include_pad_ = node.get_int("count_include_pad", 0) != 0;
    if (kind == PoolKind::average && output_requested(node, 1)) node.invalid("AveragePool has one output");
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    check_input_count(node_, inputs, 1, 1);
    if (inputs[0].defined() && !is_floating(inputs[0].type) && kind_ == PoolKind::max) {
      x_ = inputs[0].tensor;  // integer MaxPool (uint8 images): forward only, in i64 storage
    } else {
      x_ = floating_input(node_, inputs[0], "X");
    }
    type_ = inputs[0].type;
    if (x_.dim() < 3) node_.invalid("X must be [N, C, spatial...], got " + inputs[0].str());
    const Shape field(x_.shape().begin() + 2, x_.shape().end());
    if (global_) {
      g_ = whole_field(field);
    } else {
      if (kernel_.size() != field.size()) node_.invalid("kernel_shape has the wrong rank for " + inputs[0].str());
      g_ = window_geometry(node_, field, kernel_, ceil_mode_);
    }
    sources_ = &table_.of(g_);
    planes_ = x_.size(0) * x_.size(1);
    Shape y_shape{x_.size(0), x_.size(1)};
    y_shape.insert(y_shape.end(), g_.out.begin(), g_.out.end());
    Tensor y = Tensor::empty(y_shape, x_.dtype());
    if (!is_floating(type_)) {
      max_forward<std::int64_t>(y.data<std::int64_t>());
    } else {
      visit_floating(x_.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if (kind_ == PoolKind::max)
          max_forward<T>(y.data<T>());
        else
          average_forward<T>(y.data<T>());
      });
    }
    Value first;
    first.tensor = y;
    first.type = type_;
    std::vector<Value> out{first};
    // Indices: the flat offset of each maximum in X, its plane's offset plus its place in
    // the plane, row-major or (storage_order 1) column-major.
    if (kind_ == PoolKind::max && output_requested(node_, 1)) {
      std::vector<std::int64_t> indices(argmax_.size());
      const std::int64_t positions = g_.positions(), field_size = g_.field_size();
      for (std::size_t e = 0; e < argmax_.size(); ++e) {
        const std::int64_t plane = static_cast<std::int64_t>(e) / positions;
        indices[e] =
            argmax_[e] < 0 ? -1 : plane * field_size + (column_major_ ? transposed_offset(argmax_[e]) : argmax_[e]);
      }
      out.push_back(Value::integers(indices, y_shape));
    }
    return out;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (!is_floating(type_)) return {Tensor{}};  // integer X has no gradient
    Tensor dx = zeros_like(x_);
    if (grad_outputs.empty() || !grad_outputs[0].defined()) return {dx};
    const Tensor dy = grad_outputs[0].contiguous();
    visit_floating(x_.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* g = dy.data<T>();
      T* d = dx.data<T>();
      const std::int64_t positions = g_.positions(), field_size = g_.field_size();
      for (std::int64_t c = 0; c < planes_; ++c) {
        const T* gc = g + c * positions;
        T* dc = d + c * field_size;
        if (kind_ == PoolKind::max) {
          // The gradient goes to the element the maximum came from.
          for (std::int64_t p = 0; p < positions; ++p) {
            const std::int64_t a = argmax_[static_cast<std::size_t>(c * positions + p)];
            if (a >= 0) dc[a] += gc[p];
          }
          continue;
        }
        for (std::int64_t k = 0; k < g_.taps(); ++k)
          for (std::int64_t p = 0; p < positions; ++p) {
            const std::int64_t s = (*sources_)[static_cast<std::size_t>(k * positions + p)];
            if (s >= 0) dc[s] += gc[p] / static_cast<T>(divisor_[static_cast<std::size_t>(p)]);
          }
      }
    });
    return {dx};
  }

 private:
  // A row-major offset in the field as the column-major one of the same element.
  std::int64_t transposed_offset(std::int64_t offset) const {
    std::int64_t result = 0, stride = 1;
    Shape coord(g_.rank());
    for (std::size_t d = g_.rank(); d-- > 0;) {
      coord[d] = offset % g_.in[d];
      offset /= g_.in[d];
    }
    for (std::size_t d = 0; d < g_.rank(); ++d) {
      result += coord[d] * stride;
      stride *= g_.in[d];
    }
    return result;
  }

  // The maximum of each window over the elements inside X (padding never wins), and
  // where it is; a window wholly in the padding yields -inf and no gradient.
  template <class T>
  void max_forward(T* y) {
    const std::int64_t positions = g_.positions(), field_size = g_.field_size(), taps = g_.taps();
    argmax_.assign(static_cast<std::size_t>(planes_ * positions), -1);
    const T* x = x_.data<T>();
    for (std::int64_t c = 0; c < planes_; ++c) {
      const T* xc = x + c * field_size;
      for (std::int64_t p = 0; p < positions; ++p) {
        T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                      : std::numeric_limits<T>::lowest();
        std::int64_t at = -1;
        for (std::int64_t k = 0; k < taps; ++k) {
          const std::int64_t s = (*sources_)[static_cast<std::size_t>(k * positions + p)];
          // The first maximum wins ties, and a NaN propagates (as in PyTorch).
          if (s >= 0 && (at < 0 || xc[s] > best || is_nan(xc[s]))) {
            best = xc[s];
            at = s;
            if (is_nan(best)) break;
          }
        }
        y[c * positions + p] = best;
        argmax_[static_cast<std::size_t>(c * positions + p)] = at;
      }
    }
  }

  template <class T>
  void average_forward(T* y) {
    const std::int64_t positions = g_.positions(), field_size = g_.field_size(), taps = g_.taps();
    divisor_ = window_divisors();
    const T* x = x_.data<T>();
    for (std::int64_t c = 0; c < planes_; ++c) {
      const T* xc = x + c * field_size;
      T* yc = y + c * positions;
      std::fill(yc, yc + positions, T(0));
      for (std::int64_t k = 0; k < taps; ++k)
        for (std::int64_t p = 0; p < positions; ++p) {
          const std::int64_t s = (*sources_)[static_cast<std::size_t>(k * positions + p)];
          if (s >= 0) yc[p] += xc[s];
        }
      for (std::int64_t p = 0; p < positions; ++p) yc[p] /= static_cast<T>(divisor_[static_cast<std::size_t>(p)]);
    }
  }

  // What each window's sum is divided by: its taps inside X, or with count_include_pad
  // its taps inside the explicitly padded X (a ceil_mode window reaching past the end
  // padding does not count that part, as in PyTorch and ONNX Runtime). Both counts are
  // products of per-dim counts.
  std::vector<double> window_divisors() const {
    std::vector<double> divisor(static_cast<std::size_t>(g_.positions()), 1.0);
    Shape o(g_.rank(), 0);
    for (std::size_t p = 0; p < divisor.size(); ++p) {
      for (std::size_t d = 0; d < g_.rank(); ++d) {
        const std::int64_t lo = count_include_pad_ ? -g_.pad_begin[d] : 0;
        const std::int64_t hi = count_include_pad_ ? g_.in[d] + g_.pad_end[d] : g_.in[d];
        std::int64_t count = 0;
        for (std::int64_t k = 0; k < g_.kernel[d]; ++k) {
          const std::int64_t i = o[d] * g_.stride[d] - g_.pad_begin[d] + k * g_.dilation[d];
          count += i >= lo && i < hi;
        }
        divisor[p] *= static_cast<double>(std::max<std::int64_t>(count, 1));
      }
      for (std::size_t d = g_.rank(); d-- > 0;) {
        if (++o[d] < g_.out[d]) break;
        o[d] = 0;
      }
    }
    return divisor;
  }

  PoolKind kind_;
  ElementType type_ = ElementType::f32;
  bool global_ = false, column_major_ = false, ceil_mode_ = false, count_include_pad_ = false;
  Shape kernel_;
  WindowGeometry g_;
  WindowTable table_;
  const std::vector<std::int64_t>* sources_ = nullptr;  // table_'s, of g_
  std::vector<std::int64_t> argmax_;
  std::vector<double> divisor_;
  std::int64_t planes_ = 0;
  Tensor x_;
};

// ---- Index maps: every output element copies one input element (or, at -1, a constant).
// Pad builds one; its backward and forward both run through gather/scatter below.

template <class T>
void gather(const T* x, const std::vector<std::int64_t>& source, T fill, T* y) {
  for (std::size_t e = 0; e < source.size(); ++e) y[e] = source[e] >= 0 ? x[source[e]] : fill;
}

template <class T>
void scatter_add(const T* dy, const std::vector<std::int64_t>& source, T* dx) {
  for (std::size_t e = 0; e < source.size(); ++e)
    if (source[e] >= 0) dx[source[e]] += dy[e];
}

// The input index along one dim that output index i (before the begin padding `pad`) copies,
// or -1 for the constant.
std::int64_t pad_source(std::int64_t i, std::int64_t pad, std::int64_t n, const std::string& mode) {
  std::int64_t j = i - pad;
  if (j >= 0 && j < n) return j;
  if (mode == "constant") return -1;
  if (mode == "edge") return std::clamp<std::int64_t>(j, 0, n - 1);
  if (mode == "wrap") return ((j % n) + n) % n;
  // reflect about the edge elements (which are not repeated), folding as often as needed
  if (n == 1) return 0;
  const std::int64_t period = 2 * (n - 1);
  j = ((j % period) + period) % period;
  return j < n ? j : period - j;
}

class PadOp final : public Op {
 public:
  explicit PadOp(const NodeSpec& node) : Op(node) {
    mode_ = node.get_string("mode", "constant");
    if (mode_ != "constant" && mode_ != "reflect" && mode_ != "edge" && mode_ != "wrap") {
      node.unsupported("mode '" + mode_ + "'");
    }
    if (mode_ == "wrap" && node.opset < 19) node.invalid("mode 'wrap' exists from opset 19");
  }

  bool differentiable_input(std::size_t index) const override { return index == 0; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    // Pad-2 carries pads and value as attributes; Pad-11 takes them as inputs, Pad-18
    // adds the axes the pads apply to.
    const bool as_inputs = node_.opset >= 11;
    check_input_count(node_, inputs, 1, as_inputs ? (node_.opset >= 18 ? 4 : 3) : 1);
    if (inputs.empty() || !inputs[0].defined()) node_.invalid("the input data is missing");
    x_ = inputs[0].tensor;
    type_ = inputs[0].type;
    input_count_ = inputs.size();
    const std::size_t rank = static_cast<std::size_t>(x_.dim());
    Shape pads;
    double value = node_.get_float("value", 0.0);
    if (as_inputs) {
      if (inputs.size() < 2 || !inputs[1].defined()) node_.invalid("the input pads is missing");
      pads = inputs[1].to_ints(node_.where() + ": pads");
      if (inputs.size() > 2 && inputs[2].defined()) {
        const Tensor& c = inputs[2].tensor;
        if (c.numel() != 1) node_.invalid("constant_value must be one element, got " + inputs[2].str());
        value = scalar_of(c);
      }
    } else {
      pads = node_.require_ints("pads");
    }
    Shape axes;
    if (inputs.size() > 3 && inputs[3].defined()) {
      for (std::int64_t a : inputs[3].to_ints(node_.where() + ": axes")) {
        if (a < -static_cast<std::int64_t>(rank) || a >= static_cast<std::int64_t>(rank))
          node_.invalid("axis out of range");
        axes.push_back(a < 0 ? a + static_cast<std::int64_t>(rank) : a);
      }
    } else {
      for (std::size_t d = 0; d < rank; ++d) axes.push_back(static_cast<std::int64_t>(d));
    }
    if (pads.size() != 2 * axes.size()) node_.invalid("pads needs two entries per padded axis");
    Shape begin(rank, 0), end(rank, 0);
    for (std::size_t a = 0; a < axes.size(); ++a) {
      begin[static_cast<std::size_t>(axes[a])] = pads[a];
      end[static_cast<std::size_t>(axes[a])] = pads[a + axes.size()];
    }
    Shape y_shape(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      y_shape[d] = x_.size(static_cast<int>(d)) + begin[d] + end[d];
      if (y_shape[d] < 0) node_.invalid("pads crop more than the input holds");
      if (mode_ != "constant" && x_.size(static_cast<int>(d)) == 0 && y_shape[d] > 0) {
        node_.invalid("mode '" + mode_ + "' cannot pad an empty axis");
      }
    }
    source_ = index_map(y_shape, begin);
    Tensor y = Tensor::empty(y_shape, x_.dtype());
    // Integer data (shape arithmetic, masks) pads in its i64 storage, forward only.
    if (!is_floating(type_)) {
      gather(x_.data<std::int64_t>(), source_, static_cast<std::int64_t>(value), y.data<std::int64_t>());
      Value out;
      out.tensor = y;
      out.type = type_;
      return {out};
    }
    visit_floating(x_.dtype(), [&](auto zero) {
      using T = decltype(zero);
      gather(x_.data<T>(), source_, static_cast<T>(value), y.data<T>());
    });
    return {Value::floating(y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(input_count_);
    if (!is_floating(type_)) return grads;  // integer data has no gradient
    grads[0] = zeros_like(x_);
    if (grad_outputs.empty() || !grad_outputs[0].defined()) return grads;
    const Tensor dy = grad_outputs[0].contiguous();
    visit_floating(x_.dtype(), [&](auto zero) {
      using T = decltype(zero);
      scatter_add(dy.data<T>(), source_, grads[0].data<T>());
    });
    return grads;
  }

 private:
  static double scalar_of(const Tensor& t) {
    if (t.dtype() == DType::f32) return static_cast<double>(t.to_vector<float>()[0]);
    if (t.dtype() == DType::i64) return static_cast<double>(t.to_vector<std::int64_t>()[0]);
    return t.to_vector<double>()[0];
  }

  // For every element of the output (row-major), the flat input element it copies.
  std::vector<std::int64_t> index_map(const Shape& y_shape, const Shape& begin) const {
    const std::size_t rank = y_shape.size();
    const Shape x_strides = contiguous_strides(x_.shape());
    std::vector<std::vector<std::int64_t>> per_dim(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      for (std::int64_t i = 0; i < y_shape[d]; ++i) {
        per_dim[d].push_back(pad_source(i, begin[d], x_.size(static_cast<int>(d)), mode_));
      }
    }
    std::vector<std::int64_t> source(static_cast<std::size_t>(shape_numel(y_shape)));
    Shape o(rank, 0);
    for (std::size_t e = 0; e < source.size(); ++e) {
      std::int64_t s = 0;
      for (std::size_t d = 0; d < rank && s >= 0; ++d) {
        const std::int64_t j = per_dim[d][static_cast<std::size_t>(o[d])];
        s = j < 0 ? -1 : s + j * x_strides[d];
      }
      source[e] = s;
      for (std::size_t d = rank; d-- > 0;) {
        if (++o[d] < y_shape[d]) break;
        o[d] = 0;
      }
    }
    return source;
  }

  std::string mode_;
  Tensor x_;
  ElementType type_ = ElementType::f32;
  std::size_t input_count_ = 1;
  std::vector<std::int64_t> source_;
};

// ---- Resize and Upsample: per axis, each output index reads one (nearest) or two
// (linear) input indices with weights; an axis that is not resampled is skipped.

struct AxisTaps {
  std::int64_t in = 0, out = 0;
  std::int64_t taps = 1;            // per output index
  std::vector<std::int64_t> index;  // [out, taps]
  std::vector<double> weight;       // [out, taps]
};

struct ResizeRule {
  std::string mode = "nearest";                // nearest, linear
  std::string transform = "half_pixel";        // coordinate_transformation_mode
  std::string nearest = "round_prefer_floor";  // nearest_mode
};

// The input coordinate output index x maps to, ONNX's coordinate_transformation_mode.
// Its "length_resized" is in * scale, unrounded when the file gives scales (so
// align_corners on a 0.6 downsampling of 4 divides by 1.4, not by 1).
double original_coordinate(double x, double scale, std::int64_t in, const std::string& transform) {
  const double resized = static_cast<double>(in) * scale;
  if (transform == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (transform == "pytorch_half_pixel") return resized > 1.0 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (transform == "align_corners") return resized > 1.0 ? x * static_cast<double>(in - 1) / (resized - 1.0) : 0.0;
  if (transform == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  return x / scale;  // asymmetric
}

std::int64_t nearest_index(double x, const std::string& rule) {
  if (rule == "floor") return static_cast<std::int64_t>(std::floor(x));
  if (rule == "ceil") return static_cast<std::int64_t>(std::ceil(x));
  if (rule == "round_prefer_ceil") return static_cast<std::int64_t>(std::floor(x + 0.5));
  return static_cast<std::int64_t>(std::ceil(x - 0.5));  // round_prefer_floor
}

AxisTaps axis_taps(std::int64_t in, std::int64_t out, double scale, const ResizeRule& rule) {
  AxisTaps a;
  a.in = in;
  a.out = out;
  a.taps = rule.mode == "linear" ? 2 : 1;
  for (std::int64_t o = 0; o < out; ++o) {
    const double x = original_coordinate(static_cast<double>(o), scale, in, rule.transform);
    if (a.taps == 1) {
      a.index.push_back(std::clamp<std::int64_t>(nearest_index(x, rule.nearest), 0, in - 1));
      a.weight.push_back(1.0);
      continue;
    }
    // Linear between the two neighbours, a coordinate outside [0, in - 1] taking the
    // edge value (ONNX's edge padding).
    const double clamped = std::clamp(x, 0.0, static_cast<double>(in - 1));
    const std::int64_t lo = static_cast<std::int64_t>(std::floor(clamped));
    const std::int64_t hi = std::min(lo + 1, in - 1);
    const double t = clamped - static_cast<double>(lo);
    a.index.insert(a.index.end(), {lo, hi});
    a.weight.insert(a.weight.end(), {1.0 - t, t});
  }
  return a;
}

// Every output index copies its own input index exactly: the pass can be skipped.
bool is_identity(const AxisTaps& a) {
  if (a.in != a.out) return false;
  for (std::int64_t o = 0; o < a.out; ++o) {
    double own = 0.0;
    for (std::int64_t t = 0; t < a.taps; ++t) {
      const std::size_t e = static_cast<std::size_t>(o * a.taps + t);
      if (a.index[e] == o)
        own += a.weight[e];
      else if (a.weight[e] != 0.0)
        return false;
    }
    if (own != 1.0) return false;
  }
  return true;
}

// y [outer, a.out, inner] = the taps of x [outer, a.in, inner] along the middle axis.
template <class T>
void resample_axis(const T* x, const AxisTaps& a, std::int64_t outer, std::int64_t inner, T* y) {
  for (std::int64_t n = 0; n < outer; ++n)
    for (std::int64_t o = 0; o < a.out; ++o) {
      T* yr = y + (n * a.out + o) * inner;
      std::fill(yr, yr + inner, T(0));
      for (std::int64_t t = 0; t < a.taps; ++t) {
        const std::size_t e = static_cast<std::size_t>(o * a.taps + t);
        const T w = static_cast<T>(a.weight[e]);
        if (w == T(0)) continue;
        const T* xr = x + (n * a.in + a.index[e]) * inner;
        for (std::int64_t i = 0; i < inner; ++i) yr[i] += w * xr[i];
      }
    }
}

// The adjoint: dx [outer, a.in, inner] += the taps' weights times dy [outer, a.out, inner].
template <class T>
void resample_axis_adjoint(const T* dy, const AxisTaps& a, std::int64_t outer, std::int64_t inner, T* dx) {
  for (std::int64_t n = 0; n < outer; ++n)
    for (std::int64_t o = 0; o < a.out; ++o) {
      const T* gr = dy + (n * a.out + o) * inner;
      for (std::int64_t t = 0; t < a.taps; ++t) {
        const std::size_t e = static_cast<std::size_t>(o * a.taps + t);
        const T w = static_cast<T>(a.weight[e]);
        if (w == T(0)) continue;
        T* dr = dx + (n * a.in + a.index[e]) * inner;
        for (std::int64_t i = 0; i < inner; ++i) dr[i] += w * gr[i];
      }
    }
}

class ResizeOp final : public Op {
 public:
  explicit ResizeOp(const NodeSpec& node) : Op(node) {
    upsample_ = node.op_type == "Upsample";
    if (upsample_) {
      // Upsample: asymmetric coordinates, nearest rounds down.
      if (node.opset < 7) node.unsupported("Upsample before opset 7");
      rule_.mode = node.get_string("mode", "nearest");
      if (rule_.mode == "bilinear") rule_.mode = "linear";
      rule_.transform = "asymmetric";
      rule_.nearest = "floor";
    } else {
      if (node.opset < 11) node.unsupported("Resize before opset 11");
      rule_.mode = node.get_string("mode", "nearest");
      rule_.transform = node.get_string("coordinate_transformation_mode", "half_pixel");
      rule_.nearest = node.get_string("nearest_mode", "round_prefer_floor");
      if (rule_.transform != "half_pixel" && rule_.transform != "pytorch_half_pixel" &&
          rule_.transform != "align_corners" && rule_.transform != "asymmetric" &&
          rule_.transform != "tf_half_pixel_for_nn") {
        node.unsupported("coordinate_transformation_mode '" + rule_.transform + "'");
      }
      if (rule_.nearest != "round_prefer_floor" && rule_.nearest != "round_prefer_ceil" && rule_.nearest != "floor" &&
          rule_.nearest != "ceil") {
        node.unsupported("nearest_mode '" + rule_.nearest + "'");
      }
      if (node.get_int("antialias", 0) != 0) node.unsupported("antialias 1");
      const std::string policy = node.get_string("keep_aspect_ratio_policy", "stretch");
      if (policy != "stretch") node.unsupported("keep_aspect_ratio_policy '" + policy + "'");
    }
    if (rule_.mode != "nearest" && rule_.mode != "linear") node.unsupported("mode '" + rule_.mode + "'");
  }

  bool differentiable_input(std::size_t index) const override { return index == 0; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    x_ = floating_input(node_, inputs.empty() ? Value{} : inputs[0], "X");
    input_count_ = inputs.size();
    const std::size_t rank = static_cast<std::size_t>(x_.dim());
    std::vector<double> scales;
    Shape sizes;
    read_scales_and_sizes(inputs, rank, scales, sizes);
    axes_.clear();
    Shape shape = x_.shape();
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t in = x_.size(static_cast<int>(d));
      std::int64_t out = 0;
      double scale = 0.0;
      if (!sizes.empty()) {
        out = sizes[d];
        scale = static_cast<double>(out) / static_cast<double>(in);
      } else {
        scale = scales[d];
        if (!(scale > 0.0)) node_.invalid("scales must be positive");
        out = static_cast<std::int64_t>(std::floor(static_cast<double>(in) * scale));
      }
      if (out < 1 || in < 1) node_.invalid("an axis would resize from or to nothing");
      AxisTaps taps = axis_taps(in, out, scale, rule_);
      shape[d] = out;
      if (!is_identity(taps)) axes_.push_back({d, std::move(taps)});
    }
    in_shape_ = x_.shape();
    Tensor y = x_;
    Shape current = x_.shape();
    for (const auto& pass : axes_) y = run_pass(y, current, pass.first, pass.second, false);
    return {Value::floating(y.defined() && y.data() == x_.data() ? y.clone() : y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(input_count_);
    if (grad_outputs.empty() || !grad_outputs[0].defined()) {
      grads[0] = zeros_like(x_);
      return grads;
    }
    Tensor g = grad_outputs[0].contiguous();
    // The passes in reverse, each by its adjoint; the shape before pass k is the input
    // shape with the earlier passes' axes resized.
    for (std::size_t k = axes_.size(); k-- > 0;) {
      Shape before = in_shape_;
      for (std::size_t j = 0; j < k; ++j) before[axes_[j].first] = axes_[j].second.out;
      g = run_pass(g, before, axes_[k].first, axes_[k].second, true);
    }
    grads[0] = g.data() == grad_outputs[0].data() ? g.clone() : g;
    return grads;
  }

 private:
  // One axis of `t` resampled (or, `adjoint`, the gradient of that pass: t is then the
  // output's gradient and `shape` the pass's input shape, which this returns). Forward
  // updates `shape` to the pass's output shape.
  Tensor run_pass(const Tensor& t, Shape& shape, std::size_t axis, const AxisTaps& taps, bool adjoint) const {
    const std::int64_t outer = shape_numel(Shape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(axis)));
    const std::int64_t inner = shape_numel(Shape(shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, shape.end()));
    Shape result_shape = shape;
    if (!adjoint) result_shape[axis] = taps.out;
    Tensor result = adjoint ? Tensor::zeros(result_shape, t.dtype()) : Tensor::empty(result_shape, t.dtype());
    visit_floating(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (adjoint)
        resample_axis_adjoint(t.data<T>(), taps, outer, inner, result.data<T>());
      else
        resample_axis(t.data<T>(), taps, outer, inner, result.data<T>());
    });
    if (!adjoint) shape = result_shape;
    return result;
  }

  // Per axis of X: the scale or the output size, from the inputs (Resize-11+: X, roi,
  // scales, sizes; Upsample-9: X, scales) or the attribute (Upsample-7), the optional
  // 'axes' attribute (Resize-18) naming which axes they give.
  void read_scales_and_sizes(const std::vector<Value>& inputs, std::size_t rank, std::vector<double>& scales,
                             Shape& sizes) const {
    if (upsample_ && node_.opset < 9) {
      check_input_count(node_, inputs, 1, 1);
      scales = node_.get_floats("scales");
    } else if (upsample_) {
      check_input_count(node_, inputs, 2, 2);
      scales = floating_values(inputs[1], "scales");
    } else {
      // roi (input 1) only matters to tf_crop_and_resize, which the constructor refused.
      check_input_count(node_, inputs, 1, 4);
      if (inputs.size() > 2 && inputs[2].defined() && inputs[2].numel() > 0)
        scales = floating_values(inputs[2], "scales");
      if (inputs.size() > 3 && inputs[3].defined() && inputs[3].numel() > 0) {
        if (!scales.empty()) node_.invalid("both scales and sizes are given");
        sizes = inputs[3].to_ints(node_.where() + ": sizes");
      }
      if (scales.empty() && sizes.empty()) node_.invalid("neither scales nor sizes is given");
    }
    Shape axes = node_.get_ints("axes");
    if (axes.empty()) {
      const std::size_t given = sizes.empty() ? scales.size() : sizes.size();
      if (given != rank) node_.invalid("scales or sizes needs one entry per axis of X");
      return;
    }
    std::vector<double> all_scales(rank, 1.0);
    Shape all_sizes = x_.shape();
    for (std::size_t a = 0; a < axes.size(); ++a) {
      std::int64_t axis = axes[a] < 0 ? axes[a] + static_cast<std::int64_t>(rank) : axes[a];
      if (axis < 0 || axis >= static_cast<std::int64_t>(rank)) node_.invalid("axis out of range");
      if (a >= (sizes.empty() ? scales.size() : sizes.size()))
        node_.invalid("scales or sizes needs one entry per axis in 'axes'");
      if (sizes.empty())
        all_scales[static_cast<std::size_t>(axis)] = scales[a];
      else
        all_sizes[static_cast<std::size_t>(axis)] = sizes[a];
    }
    if (sizes.empty())
      scales = all_scales;
    else
      sizes = all_sizes;
  }

  std::vector<double> floating_values(const Value& v, const char* what) const {
    const Tensor& t = floating_input(node_, v, what);
    if (t.dtype() == DType::f32) {
      const auto f = t.to_vector<float>();
      return std::vector<double>(f.begin(), f.end());
    }
    return t.to_vector<double>();
  }

  bool upsample_ = false;
  ResizeRule rule_;
  Tensor x_;
  std::size_t input_count_ = 1;
  Shape in_shape_;
  std::vector<std::pair<std::size_t, AxisTaps>> axes_;  // the axes resampled, in order
};

template <class Make>
OpFactory factory(Make make) {
  return [make](const NodeSpec& node) -> std::unique_ptr<Op> { return make(node); };
}

}  // namespace

void register_pool_resize_ops(OpRegistry& registry) {
  registry.add("MaxPool", factory([](const NodeSpec& n) { return std::make_unique<PoolOp>(n, PoolKind::max, false); }));
  registry.add("AveragePool",
               factory([](const NodeSpec& n) { return std::make_unique<PoolOp>(n, PoolKind::average, false); }));
  registry.add("GlobalMaxPool",
               factory([](const NodeSpec& n) { return std::make_unique<PoolOp>(n, PoolKind::max, true); }));
  registry.add("GlobalAveragePool",
               factory([](const NodeSpec& n) { return std::make_unique<PoolOp>(n, PoolKind::average, true); }));
  registry.add("Pad", factory([](const NodeSpec& n) { return std::make_unique<PadOp>(n); }));
  registry.add("Resize", factory([](const NodeSpec& n) { return std::make_unique<ResizeOp>(n); }));
  registry.add("Upsample", factory([](const NodeSpec& n) { return std::make_unique<ResizeOp>(n); }));
}

}  // namespace tessera::onnx
