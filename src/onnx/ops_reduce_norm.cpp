// The ONNX reductions (Reduce*), Softmax / LogSoftmax, LpNormalization and the
// normalizations (LayerNormalization, InstanceNormalization, inference-mode
// BatchNormalization).
//
// Mechanisms, one each:
// - ReduceOp: every element maps to its output slot through the broadcast index of the
//   kept-dims shape (broadcast_source_index), so any set of axes is one loop forward and
//   one loop backward; a reduction is its combine, the map applied before it, the finish
//   after, and the per-element derivative (Reduction below).
// - AxisOp: Softmax, LogSoftmax and LpNormalization act along one axis of an
//   [outer, n, inner] view (ONNX's opset < 13 "coerce to 2D" is the view [outer, n*inner, 1]).
// - NormalizationOp: the three normalizations share xhat = (x - mean) * inv, the affine
//   y = xhat * scale + bias over an [groups, params, inner] layout, and its backward; they
//   differ only in where mean and inv come from.
// Everything floating, computed in the input's own precision.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "onnx/broadcast.hpp"
#include "onnx/op.hpp"
#include "onnx/typed.hpp"

namespace tessera::onnx {
namespace {

using detail::check_input_count;
using detail::dispatch;
using detail::required_input;

// `axis` in [-rank, rank) made non-negative; InvalidArgument naming the node otherwise.
std::int64_t normalize_axis(const NodeSpec& node, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    node.invalid("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + r : axis;
}

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t d = begin; d < end; ++d) p *= shape[d];
  return p;
}

// A tensor of dtype T and `shape` holding `v`.
template <class T>
Tensor tensor_of(const std::vector<T>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

// grad_outputs[k] as a contiguous tensor, or nullptr-like empty when undefined (zero).
const Tensor* grad_of(const std::vector<Tensor>& grad_outputs, std::size_t k) {
  return k < grad_outputs.size() && grad_outputs[k].defined() ? &grad_outputs[k] : nullptr;
}

// ---------------------------------------------------------------------------------------
// Reduce*.

enum class Reduction : std::uint8_t { sum, mean, sum_square, l1, l2, log_sum, log_sum_exp, max, min, prod };

// The map applied to each element before it is combined (LogSumExp shifts by the group's
// maximum so exp never overflows).
template <class T>
T pre(Reduction r, T x, T shift) {
  switch (r) {
    case Reduction::sum_square:
    case Reduction::l2: return x * x;
    case Reduction::l1: return std::abs(x);
    case Reduction::log_sum_exp: return std::exp(x - shift);
    default: return x;
  }
}

template <class T>
T combine(Reduction r, T acc, T v) {
  switch (r) {
    // A NaN wins, as numpy's and PyTorch's amax (std::max alone keeps the first).
    case Reduction::max: return v != v ? v : std::max(acc, v);
    case Reduction::min: return v != v ? v : std::min(acc, v);
    case Reduction::prod: return acc * v;
    default: return acc + v;
  }
}

template <class T>
T initial(Reduction r) {
  switch (r) {
    case Reduction::max: return -std::numeric_limits<T>::infinity();
    case Reduction::min: return std::numeric_limits<T>::infinity();
    case Reduction::prod: return T(1);
    default: return T(0);
  }
}

// The output from the combined value `s` of a group of `n` elements.
template <class T>
T finish(Reduction r, T s, std::int64_t n, T shift) {
  switch (r) {
    case Reduction::mean: return s / T(n);
    case Reduction::l2: return std::sqrt(s);
    case Reduction::log_sum: return std::log(s);
    case Reduction::log_sum_exp: return std::isinf(shift) ? shift : shift + std::log(s);
    default: return s;
  }
}

// d y / d x for an element x of a group with output y (Max/Min: 1 at the extreme, the tie
// count divides later; Prod is handled apart because of zeros).
template <class T>
T derivative(Reduction r, T x, T y, std::int64_t n) {
  switch (r) {
    case Reduction::sum: return T(1);
    case Reduction::mean: return T(1) / T(n);
    case Reduction::sum_square: return T(2) * x;
    case Reduction::l1: return x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
    case Reduction::l2: return y == 0 ? T(0) : x / y;
    case Reduction::log_sum: return std::exp(-y);
    case Reduction::log_sum_exp: return std::exp(x - y);
    case Reduction::max:
    case Reduction::min: return x == y ? T(1) : T(0);
    case Reduction::prod: return T(0);
  }
  return T(0);
}

// ReduceMax / ReduceMin split a group's gradient evenly among the elements that tie for
// the extreme (PyTorch's amax/amin); ReduceProd's gradient is the product of the others.
class ReduceOp final : public Op {
 public:
  ReduceOp(const NodeSpec& node, Reduction reduction) : Op(node), reduction_(reduction) {
    // ReduceSum takes its axes as an input from opset 13, every other Reduce* from 18.
    axes_input_ = node.opset >= (reduction == Reduction::sum ? 13 : 18);
    check_input_count(node, 1, axes_input_ ? 2 : 1);
    if (axes_input_ && node.has("axes")) node.invalid("the axes are an input at this opset, not an attribute");
    keepdims_ = node.get_int("keepdims", 1) != 0;
    noop_with_empty_axes_ = node.get_int("noop_with_empty_axes", 0) != 0;
  }

  bool differentiable_input(std::size_t index) const override { return index == 0; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = required_input(node_, inputs, 0);
    x_ = x;
    const std::vector<bool> reduced = reduced_axes(inputs, x.shape().size());
    Shape kept = x.shape(), out_shape;
    for (std::size_t d = 0; d < kept.size(); ++d) {
      if (reduced[d]) kept[d] = 1;
      if (!reduced[d] || keepdims_) out_shape.push_back(kept[d]);
    }
    kept_ = kept;
    index_ = broadcast_source_index(kept, x.shape());
    group_ = shape_numel(kept) == 0 ? 0 : x.numel() / shape_numel(kept);
    Value y = dispatch<false>(node_, x.type, [&](auto tag) { return reduce(tag); });
    y_ = y.tensor;
    return {Value::floating(y.tensor.reshape(out_shape))};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(node_.inputs.size());
    if (const Tensor* g = grad_of(grad_outputs, 0)) {
      grads[0] = dispatch<false>(node_, x_.type, [&](auto tag) { return reduce_backward(tag, g->contiguous()); });
    }
    return grads;
  }

 private:
  // Which dimensions the node reduces: its axes (attribute, or input at newer opsets),
  // all of them when none are given, none when noop_with_empty_axes says so.
  std::vector<bool> reduced_axes(const std::vector<Value>& inputs, std::size_t rank) const {
    std::vector<std::int64_t> axes;
    if (axes_input_) {
      if (const Value* a = detail::optional_input(inputs, 1)) axes = a->to_ints(node_.where() + ": the axes input");
    } else {
      axes = node_.get_ints("axes");
    }
    // "Not reduced" is the input itself only where the reduction of one element is that
    // element; ReduceSumSquare, ReduceL1, ... of nothing reduced are not pinned down.
    const bool noop = axes.empty() && noop_with_empty_axes_;
    const bool identity_of_one = reduction_ == Reduction::sum || reduction_ == Reduction::mean ||
                                 reduction_ == Reduction::max || reduction_ == Reduction::min ||
                                 reduction_ == Reduction::prod;
    if (noop && !identity_of_one) node_.unsupported("noop_with_empty_axes=1 with no axes");
    std::vector<bool> reduced(rank, axes.empty() && !noop);
    for (std::int64_t axis : axes) {
      const auto d = static_cast<std::size_t>(normalize_axis(node_, axis, rank));
      if (reduced[d]) node_.invalid("axis " + std::to_string(axis) + " appears twice");
      reduced[d] = true;
    }
    return reduced;
  }

  template <class Tg>
  Value reduce(Tg) const {
    using T = typename Tg::type;
    const T* x = x_.tensor.data<T>();
    const auto slots = static_cast<std::size_t>(shape_numel(kept_));
    std::vector<T> shift(slots, T(0));
    if (reduction_ == Reduction::log_sum_exp) shift = combined(x, Reduction::max, shift);
    const std::vector<T> s = combined(x, reduction_, shift);
    std::vector<T> y(slots);
    for (std::size_t o = 0; o < slots; ++o) y[o] = finish(reduction_, s[o], group_, shift[o]);
    return Value::floating(tensor_of(y, kept_));
  }

  // Each slot's combination of pre(x) over its group.
  template <class T>
  std::vector<T> combined(const T* x, Reduction r, const std::vector<T>& shift) const {
    std::vector<T> acc(shift.size(), initial<T>(r));
    for (std::size_t i = 0; i < index_.size(); ++i) {
      const auto o = static_cast<std::size_t>(index_[i]);
      acc[o] = combine(r, acc[o], pre(r, x[i], shift[o]));
    }
    return acc;
  }

  template <class Tg>
  Tensor reduce_backward(Tg, const Tensor& grad) const {
    using T = typename Tg::type;
    const T* x = x_.tensor.data<T>();
    const T* y = y_.data<T>();
    const T* g = grad.data<T>();
    const std::size_t slots = static_cast<std::size_t>(y_.numel());
    // Per slot, what scales the derivative: 1 / ties for Max and Min.
    std::vector<T> scale(slots, T(1));
    if (reduction_ == Reduction::max || reduction_ == Reduction::min) {
      std::vector<T> ties(slots, T(0));
      for (std::size_t i = 0; i < index_.size(); ++i) ties[index_[i]] += x[i] == y[index_[i]] ? T(1) : T(0);
      for (std::size_t o = 0; o < slots; ++o) scale[o] = ties[o] > 0 ? T(1) / ties[o] : T(0);
    }
    Tensor dx = Tensor::empty(x_.shape(), dtype_of<T>);
    T* d = dx.data<T>();
    if (reduction_ == Reduction::prod) {
      prod_backward(x, g, d);
      return dx;
    }
    for (std::size_t i = 0; i < index_.size(); ++i) {
      const auto o = static_cast<std::size_t>(index_[i]);
      d[i] = g[o] * scale[o] * derivative(reduction_, x[i], y[o], group_);
    }
    return dx;
  }

  // d prod / d x_i = the product of the other elements, exact with zeros in the group:
  // none, it is prod / x_i; one, only that zero element gets the product of the rest.
  template <class T>
  void prod_backward(const T* x, const T* g, T* d) const {
    const std::size_t slots = static_cast<std::size_t>(y_.numel());
    std::vector<T> nonzero_product(slots, T(1));
    std::vector<int> zeros(slots, 0);
    for (std::size_t i = 0; i < index_.size(); ++i) {
      const auto o = static_cast<std::size_t>(index_[i]);
      if (x[i] == 0) {
        ++zeros[o];
      } else {
        nonzero_product[o] *= x[i];
      }
    }
    for (std::size_t i = 0; i < index_.size(); ++i) {
      const auto o = static_cast<std::size_t>(index_[i]);
      T others = T(0);
      if (zeros[o] == 0) others = nonzero_product[o] / x[i];
      if (zeros[o] == 1 && x[i] == 0) others = nonzero_product[o];
      d[i] = g[o] * others;
    }
  }

  Reduction reduction_;
  bool axes_input_ = false, keepdims_ = true, noop_with_empty_axes_ = false;
  Value x_;
  Tensor y_;  // in the kept-dims shape
  Shape kept_;
  std::vector<std::int64_t> index_;  // input element -> output slot
  std::int64_t group_ = 0;           // elements per slot
};

// ---------------------------------------------------------------------------------------
// Softmax, LogSoftmax, LpNormalization: along one axis of an [outer, n, inner] view.

enum class AlongAxis : std::uint8_t { softmax, log_softmax, lp_norm };

struct AxisView {
  std::int64_t outer = 1, n = 1, inner = 1;
};

class AxisOp final : public Op {
 public:
  AxisOp(const NodeSpec& node, AlongAxis kind) : Op(node), kind_(kind) {
    check_input_count(node, 1, 1);
    // Softmax before opset 13 flattens to 2D at `axis` (default 1) and normalises each row.
    coerce_2d_ = kind != AlongAxis::lp_norm && node.opset < 13;
    axis_ = node.get_int("axis", coerce_2d_ ? 1 : -1);
    p_ = node.get_int("p", 2);
    if (kind == AlongAxis::lp_norm && p_ != 1 && p_ != 2) node.unsupported("p=" + std::to_string(p_));
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    x_ = required_input(node_, inputs, 0);
    const Shape& shape = x_.shape();
    const std::size_t rank = shape.size();
    view_ = AxisView{};  // a scalar is a line of one
    if (rank > 0) {
      const auto a = static_cast<std::size_t>(normalize_axis(node_, axis_, rank));
      view_.outer = product(shape, 0, a);
      view_.n = coerce_2d_ ? product(shape, a, rank) : shape[a];
      view_.inner = coerce_2d_ ? 1 : product(shape, a + 1, rank);
    }
    y_ = dispatch<false>(node_, x_.type, [&](auto tag) { return along(tag); });
    return {Value::floating(y_)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    const Tensor* g = grad_of(grad_outputs, 0);
    if (!g) return {Tensor()};
    return {dispatch<false>(node_, x_.type, [&](auto tag) { return along_backward(tag, g->contiguous()); })};
  }

 private:
  // Calls f(base, stride) for every line along the axis: elements base + j * stride.
  template <class F>
  void for_each_line(F&& f) const {
    for (std::int64_t o = 0; o < view_.outer; ++o) {
      for (std::int64_t k = 0; k < view_.inner; ++k) f(o * view_.n * view_.inner + k, view_.inner);
    }
  }

  template <class Tg>
  Tensor along(Tg) {
    using T = typename Tg::type;
    const T* x = x_.tensor.data<T>();
    Tensor yt = Tensor::empty(x_.shape(), dtype_of<T>);
    T* y = yt.data<T>();
    norms_.assign(static_cast<std::size_t>(view_.outer * view_.inner), 0.0);
    std::size_t line = 0;
    for_each_line([&](std::int64_t base, std::int64_t stride) {
      if (kind_ == AlongAxis::lp_norm) {
        T s = T(0);
        for (std::int64_t j = 0; j < view_.n; ++j) s += p_ == 1 ? std::abs(x[base + j * stride]) : x[base + j * stride] * x[base + j * stride];
        if (p_ == 2) s = std::sqrt(s);
        for (std::int64_t j = 0; j < view_.n; ++j) y[base + j * stride] = x[base + j * stride] / s;
        norms_[line++] = static_cast<double>(s);
        return;
      }
      // Shifted by the line's maximum so exp never overflows.
      T m = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < view_.n; ++j) m = std::max(m, x[base + j * stride]);
      T s = T(0);
      for (std::int64_t j = 0; j < view_.n; ++j) s += std::exp(x[base + j * stride] - m);
      const T log_s = std::log(s);
      for (std::int64_t j = 0; j < view_.n; ++j) {
        const T z = x[base + j * stride] - m - log_s;
        y[base + j * stride] = kind_ == AlongAxis::log_softmax ? z : std::exp(z);
      }
    });
    return yt;
  }

  // Softmax: dx = y (g - sum g y); LogSoftmax: dx = g - e^y sum g; Lp: dx = (g - d sum g y)
  // / norm with d = d norm / dx (sign(x) for p = 1, y for p = 2).
  template <class Tg>
  Tensor along_backward(Tg, const Tensor& grad) const {
    using T = typename Tg::type;
    const T* x = x_.tensor.data<T>();
    const T* y = y_.data<T>();
    const T* g = grad.data<T>();
    Tensor dxt = Tensor::empty(x_.shape(), dtype_of<T>);
    T* dx = dxt.data<T>();
    std::size_t line = 0;
    for_each_line([&](std::int64_t base, std::int64_t stride) {
      T dot = T(0);
      for (std::int64_t j = 0; j < view_.n; ++j) {
        const std::int64_t i = base + j * stride;
        dot += kind_ == AlongAxis::log_softmax ? g[i] : g[i] * y[i];
      }
      const T norm = T(norms_[line++]);
      for (std::int64_t j = 0; j < view_.n; ++j) {
        const std::int64_t i = base + j * stride;
        switch (kind_) {
          case AlongAxis::softmax: dx[i] = y[i] * (g[i] - dot); break;
          case AlongAxis::log_softmax: dx[i] = g[i] - std::exp(y[i]) * dot; break;
          case AlongAxis::lp_norm: {
            const T d = p_ == 1 ? (x[i] > 0 ? T(1) : x[i] < 0 ? T(-1) : T(0)) : y[i];
            dx[i] = (g[i] - d * dot) / norm;
            break;
          }
        }
      }
    });
    return dxt;
  }

  AlongAxis kind_;
  bool coerce_2d_ = false;
  std::int64_t axis_ = -1, p_ = 2;
  AxisView view_;
  Value x_;
  Tensor y_;
  std::vector<double> norms_;  // LpNormalization's norm per line
};

// ---------------------------------------------------------------------------------------
// LayerNormalization, InstanceNormalization, BatchNormalization (inference).

enum class Norm : std::uint8_t { layer, instance, batch };

class NormalizationOp final : public Op {
 public:
  NormalizationOp(const NodeSpec& node, Norm norm) : Op(node), norm_(norm) {
    epsilon_ = node.get_float("epsilon", 1e-5);
    if (norm == Norm::layer) {
      if (node.opset < 17) node.unsupported("LayerNormalization before opset 17");
      // Mean and InvStdDev are computed and returned in X's own type (see the report).
      if (node.get_int("stash_type", 1) != 1) node.unsupported("stash_type=" + std::to_string(node.get_int("stash_type", 1)));
      check_input_count(node, 1, 3);
    } else if (norm == Norm::instance) {
      check_input_count(node, 3, 3);
    } else {
      check_batch_norm(node);
    }
  }

  // BatchNormalization's running mean and variance are statistics, not parameters.
  bool differentiable_input(std::size_t index) const override { return index < 3; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    x_ = required_input(node_, inputs, 0);
    if (x_.shape().size() < (norm_ == Norm::layer ? 1U : 2U)) node_.invalid("X must have a channel dimension, got " + x_.str());
    return dispatch<false>(node_, x_.type, [&](auto tag) { return normalize(tag, inputs); });
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    return dispatch<false>(node_, x_.type, [&](auto tag) { return normalize_backward(tag, grad_outputs); });
  }

 private:
  static void check_batch_norm(const NodeSpec& node) {
    if (node.opset < 7) node.unsupported("BatchNormalization before opset 7");
    if (node.opset < 9 && node.get_int("spatial", 1) != 1) node.unsupported("spatial=0");
    if (node.get_int("training_mode", 0) != 0) node.unsupported("training_mode=1");
    for (std::size_t k = 1; k < node.outputs.size(); ++k) {
      if (!node.outputs[k].empty()) node.unsupported("the training outputs (running mean and variance)");
    }
    check_input_count(node, 5, 5);
  }

  // The layout [groups of normalised elements] and [outer, params, inner] of the affine:
  // element i uses parameter (i / inner) % params and statistic stat_index(i).
  void set_layout() {
    const Shape& s = x_.shape();
    const std::size_t rank = s.size();
    if (norm_ == Norm::layer) {
      const auto a = static_cast<std::size_t>(normalize_axis(node_, node_.get_int("axis", -1), rank));
      norm_shape_ = Shape(s.begin() + static_cast<std::ptrdiff_t>(a), s.end());
      params_ = product(s, a, rank);
      inner_ = 1;
      stats_shape_ = s;
      std::fill(stats_shape_.begin() + static_cast<std::ptrdiff_t>(a), stats_shape_.end(), 1);
    } else {
      params_ = s[1];
      inner_ = product(s, 2, rank);
      norm_shape_ = {params_};
    }
  }

  std::int64_t param_index(std::int64_t i) const { return (i / inner_) % params_; }
  // Layer and instance: the group (one per [params] row resp. per [inner] plane); batch: the channel.
  std::int64_t stat_index(std::int64_t i) const {
    if (norm_ == Norm::layer) return i / params_;
    if (norm_ == Norm::instance) return i / inner_;
    return param_index(i);
  }
  std::int64_t group_size() const { return norm_ == Norm::layer ? params_ : inner_; }

  // Input `index` (scale or bias) as one value per parameter: LayerNormalization's
  // broadcast to the normalised shape, the others one per channel; `fallback` if omitted.
  template <class T>
  std::vector<T> per_param(const std::vector<Value>& inputs, std::size_t index, T fallback) const {
    const Value* v = detail::optional_input(inputs, index);
    if (!v) return std::vector<T>(static_cast<std::size_t>(params_), fallback);
    if (norm_ != Norm::layer && v->numel() != params_) {
      node_.invalid("input " + std::to_string(index) + " must hold one value per channel (" + std::to_string(params_) +
                    "), got " + v->str());
    }
    if (norm_ == Norm::layer && broadcast_shapes(v->shape(), norm_shape_, node_.where()) != norm_shape_) {
      node_.invalid("input " + std::to_string(index) + " " + v->str() + " does not broadcast to the normalised shape " +
                    shape_str(norm_shape_));
    }
    if (index < 3) detail::check_same_type(node_, x_, *v);
    const std::vector<T> values = detail::elements_as<T>(node_, *v);
    if (norm_ != Norm::layer) return values;
    const std::vector<std::int64_t> source = broadcast_source_index(v->shape(), norm_shape_);
    std::vector<T> out(source.size());
    for (std::size_t p = 0; p < source.size(); ++p) out[p] = values[source[p]];
    return out;
  }

  // mean and inv (= 1 / sqrt(var + epsilon)) per statistic: of each group (two passes,
  // as ONNX's definition), or BatchNormalization's given running statistics.
  template <class T>
  void statistics(const std::vector<Value>& inputs, std::vector<T>& mean, std::vector<T>& inv) const {
    const T eps = T(epsilon_);
    if (norm_ == Norm::batch) {
      mean = per_param<T>(inputs, 3, T(0));
      inv = per_param<T>(inputs, 4, T(1));
      for (T& v : inv) v = T(1) / std::sqrt(v + eps);
      return;
    }
    const T* x = x_.tensor.data<T>();
    const std::int64_t n = group_size();
    const std::int64_t groups = n == 0 ? 0 : x_.numel() / n;
    mean.assign(static_cast<std::size_t>(groups), T(0));
    inv.assign(static_cast<std::size_t>(groups), T(0));
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const T* row = x + gi * n;
      T m = T(0), var = T(0);
      for (std::int64_t j = 0; j < n; ++j) m += row[j];
      m /= T(n);
      for (std::int64_t j = 0; j < n; ++j) var += (row[j] - m) * (row[j] - m);
      var /= T(n);
      mean[static_cast<std::size_t>(gi)] = m;
      inv[static_cast<std::size_t>(gi)] = T(1) / std::sqrt(var + eps);
    }
  }

  template <class Tg>
  std::vector<Value> normalize(Tg, const std::vector<Value>& inputs) {
    using T = typename Tg::type;
    set_layout();
    const std::vector<T> scale = per_param<T>(inputs, 1, T(1));
    const std::vector<T> bias = per_param<T>(inputs, 2, T(0));
    std::vector<T> mean, inv;
    statistics(inputs, mean, inv);
    const T* x = x_.tensor.data<T>();
    xhat_ = Tensor::empty(x_.shape(), dtype_of<T>);
    Tensor y = Tensor::empty(x_.shape(), dtype_of<T>);
    T* xh = xhat_.data<T>();
    T* yp = y.data<T>();
    for (std::int64_t i = 0, i_end = x_.numel(); i < i_end; ++i) {
      const auto s = static_cast<std::size_t>(stat_index(i));
      const auto p = static_cast<std::size_t>(param_index(i));
      xh[i] = (x[i] - mean[s]) * inv[s];
      yp[i] = xh[i] * scale[p] + bias[p];
    }
    scale_ = tensor_of(scale, {params_});
    inv_ = tensor_of(inv, {static_cast<std::int64_t>(inv.size())});
    for (std::size_t k = 0; k < 2; ++k) {
      const Value* v = detail::optional_input(inputs, k + 1);
      param_shapes_[k] = v ? std::optional<Shape>(v->shape()) : std::nullopt;
    }
    n_inputs_ = inputs.size();
    std::vector<Value> out = {Value::floating(y)};
    if (norm_ == Norm::layer && node_.outputs.size() > 1) {
      out.push_back(Value::floating(tensor_of(mean, stats_shape_)));
      out.push_back(Value::floating(tensor_of(inv, stats_shape_)));
    }
    return out;
  }

  template <class Tg>
  std::vector<Tensor> normalize_backward(Tg, const std::vector<Tensor>& grad_outputs) const {
    using T = typename Tg::type;
    const std::int64_t numel = x_.numel();
    const Tensor* gy_t = grad_of(grad_outputs, 0);
    const Tensor gy_c = gy_t ? gy_t->contiguous() : Tensor::zeros(x_.shape(), dtype_of<T>);
    const T* gy = gy_c.data<T>();
    const T* xh = xhat_.data<T>();
    const T* scale = scale_.data<T>();
    const T* inv = inv_.data<T>();
    // The affine: d xhat, d scale and d bias per parameter.
    std::vector<T> dxhat(static_cast<std::size_t>(numel)), dscale(static_cast<std::size_t>(params_), T(0)),
        dbias(static_cast<std::size_t>(params_), T(0));
    for (std::int64_t i = 0; i < numel; ++i) {
      const auto p = static_cast<std::size_t>(param_index(i));
      dxhat[static_cast<std::size_t>(i)] = gy[i] * scale[p];
      dscale[p] += gy[i] * xh[i];
      dbias[p] += gy[i];
    }
    Tensor dx = Tensor::empty(x_.shape(), dtype_of<T>);
    if (norm_ == Norm::batch) {
      T* d = dx.data<T>();
      for (std::int64_t i = 0; i < numel; ++i) d[i] = dxhat[static_cast<std::size_t>(i)] * inv[stat_index(i)];
    } else {
      group_backward<T>(dxhat, grad_outputs, dx.data<T>());
    }
    std::vector<Tensor> grads(n_inputs_);
    grads[0] = dx;
    const std::vector<T>* param_grads[2] = {&dscale, &dbias};
    for (std::size_t k = 0; k < 2; ++k) {
      if (!param_shapes_[k]) continue;  // omitted
      const Tensor full = tensor_of(*param_grads[k], norm_shape_);
      // LayerNormalization's scale and bias may broadcast to the normalised shape.
      grads[k + 1] = norm_ == Norm::layer ? reduce_to_shape(full, *param_shapes_[k]) : full.reshape(*param_shapes_[k]);
    }
    return grads;
  }

  // Through xhat = (x - mean) * inv of each group of n: dx = inv (dxhat - mean(dxhat) -
  // xhat mean(dxhat xhat)), plus LayerNormalization's Mean output (d mean / dx = 1/n) and
  // InvStdDev output (d inv / dx = -inv^2 xhat / n).
  template <class T>
  void group_backward(const std::vector<T>& dxhat, const std::vector<Tensor>& grad_outputs, T* dx) const {
    const T* xh = xhat_.data<T>();
    const T* inv = inv_.data<T>();
    const Tensor* gm_t = norm_ == Norm::layer ? grad_of(grad_outputs, 1) : nullptr;
    const Tensor* gr_t = norm_ == Norm::layer ? grad_of(grad_outputs, 2) : nullptr;
    const Tensor gm_c = gm_t ? gm_t->contiguous() : Tensor();
    const Tensor gr_c = gr_t ? gr_t->contiguous() : Tensor();
    const std::int64_t n = group_size();
    const std::int64_t groups = n == 0 ? 0 : x_.numel() / n;
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      T a = T(0), b = T(0);
      for (std::int64_t j = 0; j < n; ++j) {
        a += dxhat[static_cast<std::size_t>(gi * n + j)];
        b += dxhat[static_cast<std::size_t>(gi * n + j)] * xh[gi * n + j];
      }
      a /= T(n);
      b /= T(n);
      const T gm = gm_t ? gm_c.data<T>()[gi] : T(0);
      const T gr = gr_t ? gr_c.data<T>()[gi] : T(0);
      const T r = inv[gi];
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t i = gi * n + j;
        dx[i] = r * (dxhat[static_cast<std::size_t>(i)] - a - xh[i] * b) + gm / T(n) - gr * r * r * xh[i] / T(n);
      }
    }
  }

  Norm norm_;
  double epsilon_ = 1e-5;
  Value x_;
  Shape norm_shape_, stats_shape_;
  std::int64_t params_ = 1, inner_ = 1;
  Tensor xhat_, scale_, inv_;
  std::array<std::optional<Shape>, 2> param_shapes_;  // of the scale and bias inputs (none when omitted)
  std::size_t n_inputs_ = 1;
};

template <class OpClass, class Kind>
OpFactory factory(Kind kind) {
  return [kind](const NodeSpec& node) -> std::unique_ptr<Op> { return std::make_unique<OpClass>(node, kind); };
}

}  // namespace

void register_reduce_norm_ops(OpRegistry& registry) {
  registry.add("ReduceSum", factory<ReduceOp>(Reduction::sum));
  registry.add("ReduceMean", factory<ReduceOp>(Reduction::mean));
  registry.add("ReduceSumSquare", factory<ReduceOp>(Reduction::sum_square));
  registry.add("ReduceL1", factory<ReduceOp>(Reduction::l1));
  registry.add("ReduceL2", factory<ReduceOp>(Reduction::l2));
  registry.add("ReduceLogSum", factory<ReduceOp>(Reduction::log_sum));
  registry.add("ReduceLogSumExp", factory<ReduceOp>(Reduction::log_sum_exp));
  registry.add("ReduceMax", factory<ReduceOp>(Reduction::max));
  registry.add("ReduceMin", factory<ReduceOp>(Reduction::min));
  registry.add("ReduceProd", factory<ReduceOp>(Reduction::prod));
  registry.add("Softmax", factory<AxisOp>(AlongAxis::softmax));
  registry.add("LogSoftmax", factory<AxisOp>(AlongAxis::log_softmax));
  registry.add("LpNormalization", factory<AxisOp>(AlongAxis::lp_norm));
  registry.add("LayerNormalization", factory<NormalizationOp>(Norm::layer));
  registry.add("InstanceNormalization", factory<NormalizationOp>(Norm::instance));
  registry.add("BatchNormalization", factory<NormalizationOp>(Norm::batch));
}

}  // namespace tessera::onnx
