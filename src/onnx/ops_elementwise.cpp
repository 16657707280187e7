// The elementwise ONNX ops of several inputs: arithmetic with multidirectional
// broadcasting, comparisons and logic, Where, Cast, Clip, Identity and Dropout (the
// functions of one input, the activations among them: ops_unary.cpp).
//
// Two mechanisms carry the op set: BinaryOp<Math> (one broadcasting loop; each input's
// gradient summed back to its shape with reduce_to_shape) and VariadicOp (Sum, Mean, Max, Min over any number of
// broadcast inputs). Floating values compute in their own precision (T is float or
// double); integer and boolean values compute in their int64 storage, wrapped back to
// their declared width, with ONNX's integer semantics (Div truncates toward zero).

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>

#include "onnx/broadcast.hpp"
#include "onnx/op.hpp"
#include "onnx/typed.hpp"

namespace tessera::onnx {
namespace {

using detail::check_input_count;
using detail::dispatch;
using detail::required_input;
using detail::tensor_from;


// ---------------------------------------------------------------------------------------
// Binary ops with multidirectional broadcasting. A Math struct gives value(a, b) and the
// partial derivatives d_a(a, b, y), d_b(a, b, y); `integers` (runs on integer values),
// `logical` (the output is bool: no gradient), `bool_inputs` (And/Or/Xor) and
// `mixed_types` (Pow: the exponent's type may differ from the base's).

struct Arithmetic {
  static constexpr bool integers = true;
  static constexpr bool logical = false;
  static constexpr bool bool_inputs = false;
  static constexpr bool mixed_types = false;
};
struct Add : Arithmetic {
  template <class T> static T value(T a, T b) { return a + b; }
  template <class T> static T d_a(T, T, T) { return T(1); }
  template <class T> static T d_b(T, T, T) { return T(1); }
};
struct Sub : Arithmetic {
  template <class T> static T value(T a, T b) { return a - b; }
  template <class T> static T d_a(T, T, T) { return T(1); }
  template <class T> static T d_b(T, T, T) { return T(-1); }
};
struct Mul : Arithmetic {
  template <class T> static T value(T a, T b) { return a * b; }
  template <class T> static T d_a(T, T b, T) { return b; }
  template <class T> static T d_b(T a, T, T) { return a; }
};
struct Div : Arithmetic {
  // Integer division truncates toward zero (C++'s /); a zero divisor is an error, not UB.
  template <class T> static T value(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) throw InvalidArgument("integer division by zero");
      if (b == -1) return static_cast<T>(0ULL - static_cast<std::uint64_t>(a));  // INT64_MIN / -1 wraps
    }
    return a / b;
  }
  template <class T> static T d_a(T, T b, T) { return T(1) / b; }
  template <class T> static T d_b(T, T b, T y) { return -y / b; }
};
struct Pow : Arithmetic {
  static constexpr bool mixed_types = true;
  template <class T> static T value(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return integer_power(a, b);
    } else {
      return std::pow(a, b);
    }
  }
  template <class T> static T d_a(T a, T b, T) { return b == 0 ? T(0) : b * std::pow(a, b - T(1)); }
  // d(a^b)/db = a^b log a, taken as 0 for a <= 0 where the log is undefined.
  template <class T> static T d_b(T a, T, T y) { return a > 0 ? y * std::log(a) : T(0); }
  // Exact integer powers by squaring (wrapping like int64 multiplication); a negative
  // exponent truncates 1/a^|b| toward zero.
  static std::int64_t integer_power(std::int64_t a, std::int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 == 0 ? 1 : -1) : 0;
    std::uint64_t result = 1, base = static_cast<std::uint64_t>(a);
    for (auto e = static_cast<std::uint64_t>(b); e != 0; e >>= 1) {
      if (e & 1) result *= base;
      base *= base;
    }
    return static_cast<std::int64_t>(result);
  }
};
struct PRelu : Arithmetic {
  static constexpr bool integers = false;
  template <class T> static T value(T x, T slope) { return x < 0 ? slope * x : x; }
  template <class T> static T d_a(T x, T slope, T) { return x < 0 ? slope : T(1); }
  template <class T> static T d_b(T x, T, T) { return x < 0 ? x : T(0); }
};

struct Logical : Arithmetic {
  static constexpr bool logical = true;
  template <class T> static T d_a(T, T, T) { return T(0); }
  template <class T> static T d_b(T, T, T) { return T(0); }
};
struct Equal : Logical {
  template <class T> static bool value(T a, T b) { return a == b; }
};
struct Less : Logical {
  template <class T> static bool value(T a, T b) { return a < b; }
};
struct LessOrEqual : Logical {
  template <class T> static bool value(T a, T b) { return a <= b; }
};
struct Greater : Logical {
  template <class T> static bool value(T a, T b) { return a > b; }
};
struct GreaterOrEqual : Logical {
  template <class T> static bool value(T a, T b) { return a >= b; }
};
struct BoolLogic : Logical {
  static constexpr bool bool_inputs = true;
};
struct And : BoolLogic {
  template <class T> static bool value(T a, T b) { return a != 0 && b != 0; }
};
struct Or : BoolLogic {
  template <class T> static bool value(T a, T b) { return a != 0 || b != 0; }
};
struct Xor : BoolLogic {
  template <class T> static bool value(T a, T b) { return (a != 0) != (b != 0); }
};

// Which element of an input each output element reads (broadcast_source_index), with no
// table when the input already has the output's shape (a residual Add): the identity
// needs none, and the table costs 8 bytes per element of a large field.
class SourceIndex {
 public:
  SourceIndex() = default;
  SourceIndex(const Shape& in, const Shape& out) {
    if (in != out) table_ = broadcast_source_index(in, out);
  }
  std::int64_t operator()(std::int64_t i) const { return table_.empty() ? i : table_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<std::int64_t> table_;
};

// The element type two inputs compute in: their common type, or for Pow (whose exponent
// may differ) the base's floating type, else double when only the exponent is floating
// (the result then truncates back to the integer base type, as numpy's astype does).
ElementType compute_type(const NodeSpec& node, const Value& a, const Value& b, bool mixed_types) {
  if (a.type == b.type) return a.type;
  if (!mixed_types) detail::check_same_type(node, a, b);
  if (is_floating(a.type)) return a.type;
  return is_floating(b.type) ? ElementType::f64 : ElementType::i64;
}

template <class Math>
class BinaryOp final : public Op {
 public:
  explicit BinaryOp(const NodeSpec& node) : Op(node) { check_input_count(node, 2, 2); }

  bool differentiable_input(std::size_t index) const override {
    // Pow's output has the base's type: an integer base has no gradient, nor an integer exponent.
    return !Math::logical && index < 2 && is_floating(types_[0]) && is_floating(types_[index]);
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& a = required_input(node_, inputs, 0);
    const Value& b = required_input(node_, inputs, 1);
    if (Math::bool_inputs && (a.type != ElementType::boolean || b.type != ElementType::boolean)) {
      node_.invalid("expects bool inputs, got " + a.str() + " and " + b.str());
    }
    types_ = {a.type, b.type};
    const ElementType type = compute_type(node_, a, b, Math::mixed_types);
    a_ = detail::convert(node_, a, type);
    b_ = detail::convert(node_, b, type);
    const Shape shape = broadcast_shapes(a.shape(), b.shape(), node_.where());
    a_index_ = SourceIndex(a.shape(), shape);
    b_index_ = SourceIndex(b.shape(), shape);
    Value y = detail::make_value(shape, Math::logical ? ElementType::boolean : type);
    try {
      dispatch<Math::integers>(node_, type, [&](auto tag) { compute(tag, y); });
    } catch (const InvalidArgument& e) {
      node_.invalid(e.what());  // integer division by zero, named by the node
    }
    y_ = y;
    // Pow's output has the base's type.
    return {Math::logical ? y : detail::convert(node_, y, a.type)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (Math::logical || grad_outputs.empty() || !grad_outputs[0].defined() || !is_floating(y_.type)) {
      return {Tensor(), Tensor()};
    }
    return dispatch<false>(node_, y_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Tensor g = grad_outputs[0].contiguous();
      const T* gp = g.data<T>();
      const T* a = a_.tensor.data<T>();
      const T* b = b_.tensor.data<T>();
      const T* y = y_.tensor.data<T>();
      std::vector<Tensor> grads(2);
      if (differentiable_input(0)) {
        grads[0] = reduce_to_shape(tensor_from<T>(y_.shape(), [&](std::int64_t i) {
          return gp[i] * Math::d_a(a[a_index_(i)], b[b_index_(i)], y[i]);
        }), a_.shape());
        grads[0] = as_input_type(grads[0], 0);
      }
      if (differentiable_input(1)) {
        grads[1] = reduce_to_shape(tensor_from<T>(y_.shape(), [&](std::int64_t i) {
          return gp[i] * Math::d_b(a[a_index_(i)], b[b_index_(i)], y[i]);
        }), b_.shape());
        grads[1] = as_input_type(grads[1], 1);
      }
      return grads;
    });
  }

 private:
  // A gradient computed in the compute type, in the type of input `index` (Pow's f32
  // exponent of an f64 base).
  Tensor as_input_type(const Tensor& grad, std::size_t index) const {
    return detail::convert(node_, Value::floating(grad), types_[index]).tensor;
  }

  template <class Tg>
  void compute(Tg, Value& y) const {
    using T = typename Tg::type;
    using Out = std::conditional_t<Math::logical, std::int64_t, T>;
    const T* a = a_.tensor.data<T>();
    const T* b = b_.tensor.data<T>();
    Out* o = y.tensor.data<Out>();
    for (std::int64_t i = 0, i_end = y.numel(); i < i_end; ++i) {
      o[i] = static_cast<Out>(Math::value(a[a_index_(i)], b[b_index_(i)]));
      if constexpr (std::is_integral_v<T> && !Math::logical) o[i] = detail::wrap_integer(y.type, o[i]);
    }
  }

  std::array<ElementType, 2> types_{};
  Value a_, b_, y_;  // the inputs in the compute type, the output before its final cast
  SourceIndex a_index_, b_index_;
};

// ---------------------------------------------------------------------------------------
// Sum, Mean, Max, Min: any number of inputs of one type, broadcast together. Max and Min
// split the gradient evenly among the inputs that tie for the extreme (as PyTorch's
// maximum/minimum do).

enum class Fold : std::uint8_t { sum, mean, max, min };

class VariadicOp final : public Op {
 public:
  VariadicOp(const NodeSpec& node, Fold fold) : Op(node), fold_(fold) {
    if (node.inputs.empty()) node.invalid("expects at least one input");
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    inputs_.clear();
    Shape shape;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      inputs_.push_back(required_input(node_, inputs, k));
      detail::check_same_type(node_, inputs_.front(), inputs_.back());
      shape = k == 0 ? inputs_[k].shape() : broadcast_shapes(shape, inputs_[k].shape(), node_.where());
    }
    index_.clear();
    for (const Value& v : inputs_) index_.emplace_back(v.shape(), shape);
    y_ = detail::make_value(shape, inputs_.front().type);
    const bool integers = fold_ == Fold::max || fold_ == Fold::min;
    auto body = [&](auto tag) { combine(tag); };
    if (integers) {
      dispatch<true>(node_, y_.type, body);
    } else {
      dispatch<false>(node_, y_.type, body);
    }
    return {y_};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(inputs_.size());
    if (grad_outputs.empty() || !grad_outputs[0].defined() || !is_floating(y_.type)) return grads;
    dispatch<false>(node_, y_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Tensor g = grad_outputs[0].contiguous();
      const T* gp = g.data<T>();
      const T* y = y_.tensor.data<T>();
      // The share of each output element's gradient that every input receiving it gets.
      std::vector<T> share(static_cast<std::size_t>(y_.numel()), T(1));
      if (fold_ == Fold::mean) std::fill(share.begin(), share.end(), T(1) / T(inputs_.size()));
      if (fold_ == Fold::max || fold_ == Fold::min) {
        std::vector<T> ties(share.size(), T(0));
        for (std::size_t k = 0; k < inputs_.size(); ++k) {
          for (std::size_t i = 0; i < ties.size(); ++i) ties[i] += receives<T>(k, i, y[i]) ? T(1) : T(0);
        }
        for (std::size_t i = 0; i < ties.size(); ++i) share[i] = T(1) / ties[i];
      }
      for (std::size_t k = 0; k < inputs_.size(); ++k) {
        grads[k] = reduce_to_shape(tensor_from<T>(y_.shape(), [&](std::int64_t i) {
          const auto u = static_cast<std::size_t>(i);
          return receives<T>(k, u, y[u]) ? gp[i] * share[u] : T(0);
        }), inputs_[k].shape());
      }
    });
    return grads;
  }

 private:
  template <class Tg>
  void combine(Tg) {
    using T = typename Tg::type;
    T* y = y_.tensor.data<T>();
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      const T* x = inputs_[k].tensor.data<T>();
      const SourceIndex& src = index_[k];
      for (std::int64_t i = 0, i_end = y_.numel(); i < i_end; ++i) {
        const T v = x[src(i)];
        if (k == 0 || fold_ == Fold::sum || fold_ == Fold::mean) {
          y[i] = k == 0 ? v : y[i] + v;
        } else {
          // A NaN wins, as numpy's and PyTorch's maximum (std::max alone keeps the first).
          y[i] = v != v ? v : fold_ == Fold::max ? std::max(y[i], v) : std::min(y[i], v);
        }
      }
    }
    if (fold_ == Fold::mean) {
      for (std::int64_t i = 0, i_end = y_.numel(); i < i_end; ++i) y[i] /= T(inputs_.size());
    }
  }

  // Whether input k receives output element i's gradient (every input does for Sum and
  // Mean; those equal to the extreme for Max and Min).
  template <class T>
  bool receives(std::size_t k, std::size_t i, T y) const {
    if (fold_ == Fold::sum || fold_ == Fold::mean) return true;
    return inputs_[k].tensor.data<T>()[index_[k](static_cast<std::int64_t>(i))] == y;
  }

  Fold fold_;
  std::vector<Value> inputs_;
  std::vector<SourceIndex> index_;
  Value y_;
};

// ---------------------------------------------------------------------------------------
// Not, Where, Clip, Cast, Identity, Dropout.

class NotOp final : public Op {
 public:
  explicit NotOp(const NodeSpec& node) : Op(node) { check_input_count(node, 1, 1); }
  bool differentiable_input(std::size_t) const override { return false; }
  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = required_input(node_, inputs, 0);
    if (x.type != ElementType::boolean) node_.invalid("expects a bool input, got " + x.str());
    const std::int64_t* p = x.tensor.data<std::int64_t>();
    Value y = detail::make_value(x.shape(), ElementType::boolean);
    std::int64_t* o = y.tensor.data<std::int64_t>();
    for (std::int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = p[i] == 0 ? 1 : 0;
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override { return {Tensor()}; }
};

// Where(condition, X, Y): X where the condition holds, else Y, all three broadcast.
class WhereOp final : public Op {
 public:
  explicit WhereOp(const NodeSpec& node) : Op(node) { check_input_count(node, 3, 3); }
  bool differentiable_input(std::size_t index) const override { return index > 0 && is_floating(type_); }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& c = required_input(node_, inputs, 0);
    const Value& x = required_input(node_, inputs, 1);
    const Value& y = required_input(node_, inputs, 2);
    if (c.type != ElementType::boolean) node_.invalid("expects a bool condition, got " + c.str());
    detail::check_same_type(node_, x, y);
    type_ = x.type;
    shapes_ = {x.shape(), y.shape()};
    const Shape shape =
        broadcast_shapes(broadcast_shapes(c.shape(), x.shape(), node_.where()), y.shape(), node_.where());
    const SourceIndex ci(c.shape(), shape), xi(x.shape(), shape), yi(y.shape(), shape);
    const auto n = static_cast<std::size_t>(shape_numel(shape));
    const std::int64_t* cp = c.tensor.data<std::int64_t>();
    taken_.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) taken_[i] = cp[ci(static_cast<std::int64_t>(i))] != 0;
    Value out = detail::make_value(shape, type_);
    dispatch<true>(node_, type_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.tensor.data<T>();
      const T* yp = y.tensor.data<T>();
      T* o = out.tensor.data<T>();
      for (std::size_t i = 0; i < n; ++i) {
        const auto e = static_cast<std::int64_t>(i);
        o[i] = taken_[i] ? xp[xi(e)] : yp[yi(e)];
      }
    });
    out_shape_ = shape;
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(3);
    if (grad_outputs.empty() || !grad_outputs[0].defined() || !is_floating(type_)) return grads;
    dispatch<false>(node_, type_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Tensor g = grad_outputs[0].contiguous();
      const T* gp = g.data<T>();
      for (std::size_t k = 0; k < 2; ++k) {
        const bool when = k == 0;  // X takes the gradient where the condition holds, Y elsewhere
        grads[k + 1] = reduce_to_shape(tensor_from<T>(out_shape_, [&](std::int64_t i) {
          return taken_[static_cast<std::size_t>(i)] == when ? gp[i] : T(0);
        }), shapes_[k]);
      }
    });
    return grads;
  }

 private:
  ElementType type_ = ElementType::f32;
  std::array<Shape, 2> shapes_;
  Shape out_shape_;
  std::vector<bool> taken_;
};

// Clip(x, min, max): bounds as optional scalar inputs (opset 11+) or float attributes
// (opset 6-10). The gradient passes where min <= x <= max (PyTorch's clamp).
class ClipOp final : public Op {
 public:
  explicit ClipOp(const NodeSpec& node) : Op(node) {
    if (node.opset < 6) node.unsupported("Clip before opset 6");
    check_input_count(node, 1, node.opset >= 11 ? 3 : 1);
  }
  bool differentiable_input(std::size_t index) const override { return index == 0; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    x_ = required_input(node_, inputs, 0);
    Value y = detail::make_value(x_.shape(), x_.type);
    dispatch<true>(node_, x_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T lo = bound<T>(inputs, 1, "min", std::numeric_limits<T>::lowest());
      const T hi = bound<T>(inputs, 2, "max", std::numeric_limits<T>::max());
      lo_ = static_cast<double>(lo);
      hi_ = static_cast<double>(hi);
      const T* x = x_.tensor.data<T>();
      T* o = y.tensor.data<T>();
      // min > max gives max everywhere, as ONNX specifies; a NaN stays NaN (numpy's clip).
      for (std::int64_t i = 0, i_end = x_.numel(); i < i_end; ++i) o[i] = x[i] != x[i] ? x[i] : std::min(hi, std::max(lo, x[i]));
    });
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(node_.inputs.size());
    if (grad_outputs.empty() || !grad_outputs[0].defined() || !is_floating(x_.type)) return grads;
    grads[0] = dispatch<false>(node_, x_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Tensor g = grad_outputs[0].contiguous();
      const T* gp = g.data<T>();
      const T* x = x_.tensor.data<T>();
      const T lo = T(lo_), hi = T(hi_);
      return tensor_from<T>(x_.shape(), [&](std::int64_t i) { return x[i] >= lo && x[i] <= hi ? gp[i] : T(0); });
    });
    return grads;
  }

 private:
  template <class T>
  T bound(const std::vector<Value>& inputs, std::size_t index, const char* key, T fallback) const {
    if (node_.opset < 11) return node_.has(key) ? static_cast<T>(node_.get_float(key, 0.0)) : fallback;
    const Value* v = detail::optional_input(inputs, index);
    if (!v) return fallback;
    if (v->numel() != 1) node_.invalid(std::string("input '") + key + "' must be a scalar, got " + v->str());
    detail::check_same_type(node_, x_, *v);
    return detail::elements_as<T>(node_, *v).front();
  }

  Value x_;
  double lo_ = 0.0, hi_ = 0.0;
};

// ONNX's TensorProto.DataType to the element type tessera runs; refused by name otherwise.
ElementType element_type_of(const NodeSpec& node, std::int64_t data_type) {
  for (ElementType t : {ElementType::f32, ElementType::f64, ElementType::i64, ElementType::i32, ElementType::i16,
                        ElementType::i8, ElementType::u8, ElementType::boolean}) {
    if (onnx_data_type(t) == data_type) return t;
  }
  static const char* const names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32",
                                      "int64", "string", "bool", "float16", "double", "uint32", "uint64",
                                      "complex64", "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz",
                                      "float8e5m2", "float8e5m2fnuz", "uint4", "int4"};
  const bool named = data_type >= 0 && data_type < static_cast<std::int64_t>(std::size(names));
  node.unsupported("Cast to " + (named ? std::string(names[data_type]) : "data type " + std::to_string(data_type)));
}

// Cast (to = the attribute) and CastLike (to = the second input's type). The gradient
// flows back, cast to the input's type, only between floating types.
class CastOp final : public Op {
 public:
  CastOp(const NodeSpec& node, bool like) : Op(node), like_(like) {
    check_input_count(node, like ? 2 : 1, like ? 2 : 1);
    if (!like) to_ = element_type_of(node, node.require_int("to"));
    if (node.has("saturate") && node.get_int("saturate", 1) != 1) node.unsupported("saturate=0");
  }
  bool differentiable_input(std::size_t index) const override {
    return index == 0 && is_floating(from_) && is_floating(to_);
  }
  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = required_input(node_, inputs, 0);
    if (like_) to_ = required_input(node_, inputs, 1).type;
    from_ = x.type;
    return {detail::convert(node_, x, to_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(like_ ? 2 : 1);
    if (!grad_outputs.empty() && grad_outputs[0].defined() && differentiable_input(0)) {
      grads[0] = detail::convert(node_, Value::floating(grad_outputs[0]), from_).tensor;
    }
    return grads;
  }

 private:
  bool like_;
  ElementType from_ = ElementType::f32, to_ = ElementType::f32;
};

// Identity and inference-mode Dropout: the output is the input; Dropout's optional mask
// output is all true.
class PassThroughOp final : public Op {
 public:
  PassThroughOp(const NodeSpec& node, bool dropout) : Op(node), dropout_(dropout) {
    if (!dropout) {
      check_input_count(node, 1, 1);
      return;
    }
    if (node.opset < 7) node.unsupported("Dropout before opset 7 (is_test)");
    check_input_count(node, 1, node.opset >= 12 ? 3 : 1);
    // Before opset 10 the mask had the data's type; tessera writes the bool mask of 10+.
    if (node.opset < 10 && node.outputs.size() > 1 && !node.outputs[1].empty()) {
      node.unsupported("the mask output before opset 10");
    }
  }
  bool differentiable_input(std::size_t index) const override { return index == 0; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = required_input(node_, inputs, 0);
    n_inputs_ = inputs.size();
    if (!dropout_) return {x};
    if (training(inputs)) node_.unsupported("training_mode=true with a nonzero ratio");
    if (node_.outputs.size() < 2) return {x};
    Value mask = detail::make_value(x.shape(), ElementType::boolean);
    std::fill_n(mask.tensor.data<std::int64_t>(), mask.numel(), std::int64_t{1});
    return {x, mask};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(n_inputs_);
    if (!grad_outputs.empty()) grads[0] = grad_outputs[0];
    return grads;
  }

 private:
  // Whether the node drops anything: training_mode true with a ratio other than 0 (with
  // ratio 0 training-mode Dropout is the identity too).
  bool training(const std::vector<Value>& inputs) const {
    const Value* mode = detail::optional_input(inputs, 2);
    if (!mode || mode->to_ints("Dropout's training_mode").at(0) == 0) return false;
    const Value* ratio = detail::optional_input(inputs, 1);
    const double r = ratio ? detail::elements_as<double>(node_, *ratio).at(0) : 0.5;
    return r != 0.0;
  }

  bool dropout_;
  std::size_t n_inputs_ = 1;
};

template <class OpClass, class... Args>
OpFactory factory(Args... args) {
  return [=](const NodeSpec& node) -> std::unique_ptr<Op> { return std::make_unique<OpClass>(node, args...); };
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  // Binary, broadcasting.
  registry.add("Add", factory<BinaryOp<Add>>());
  registry.add("Sub", factory<BinaryOp<Sub>>());
  registry.add("Mul", factory<BinaryOp<Mul>>());
  registry.add("Div", factory<BinaryOp<Div>>());
  registry.add("Pow", factory<BinaryOp<Pow>>());
  registry.add("PRelu", factory<BinaryOp<PRelu>>());
  registry.add("Equal", factory<BinaryOp<Equal>>());
  registry.add("Less", factory<BinaryOp<Less>>());
  registry.add("LessOrEqual", factory<BinaryOp<LessOrEqual>>());
  registry.add("Greater", factory<BinaryOp<Greater>>());
  registry.add("GreaterOrEqual", factory<BinaryOp<GreaterOrEqual>>());
  registry.add("And", factory<BinaryOp<And>>());
  registry.add("Or", factory<BinaryOp<Or>>());
  registry.add("Xor", factory<BinaryOp<Xor>>());
  // Variadic.
  registry.add("Sum", factory<VariadicOp>(Fold::sum));
  registry.add("Mean", factory<VariadicOp>(Fold::mean));
  registry.add("Max", factory<VariadicOp>(Fold::max));
  registry.add("Min", factory<VariadicOp>(Fold::min));
  // The rest.
  registry.add("Not", factory<NotOp>());
  registry.add("Where", factory<WhereOp>());
  registry.add("Clip", factory<ClipOp>());
  registry.add("Cast", factory<CastOp>(false));
  registry.add("CastLike", factory<CastOp>(true));
  registry.add("Identity", factory<PassThroughOp>(false));
  registry.add("Dropout", factory<PassThroughOp>(true));
}

}  // namespace tessera::onnx
