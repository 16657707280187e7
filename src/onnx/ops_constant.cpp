// The shape family's ops whose outputs do not depend differentiably on their inputs:
// Shape, Size, Constant, ConstantOfShape, Range (the rest of the family: ops_shape.cpp;
// what both share: shape_family.hpp). They run on every element type and give every
// input an undefined gradient.

#include "onnx/shape_family.hpp"

namespace tessera::onnx {

namespace {

using namespace shape_family;

// ---- Shapes and constants -----------------------------------------------------------------

class ShapeOf final : public NoGradientOp {
 public:
  explicit ShapeOf(const NodeSpec& node)
      : NoGradientOp(node),
        start_(node.get_int("start", 0)),
        end_(node.get_int("end", std::numeric_limits<std::int64_t>::max())) {}

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Shape& in = input(node_, inputs, 0).shape();
    remember(inputs);
    // start and end (opset 15) clamp like Slice's.
    const auto rank = static_cast<std::int64_t>(in.size());
    auto clamp = [rank](std::int64_t k) { return std::clamp<std::int64_t>(k < 0 ? k + rank : k, 0, rank); };
    const std::int64_t begin = clamp(start_);
    const std::int64_t end = std::max(begin, clamp(end_));
    const Indices dims(in.begin() + begin, in.begin() + end);
    return {Value::integers(dims, Shape{end - begin})};
  }

 private:
  std::int64_t start_;
  std::int64_t end_;
};

class Size final : public NoGradientOp {
 public:
  using NoGradientOp::NoGradientOp;
  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = input(node_, inputs, 0);
    remember(inputs);
    return {Value::integers({x.numel()}, Shape{})};
  }
};

class Constant final : public NoGradientOp {
 public:
  explicit Constant(const NodeSpec& node) : NoGradientOp(node), value_(value_of(node)) {}
  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    remember(inputs);
    return {value_};
  }

 private:
  // The one value attribute the node carries, as a tensor.
  static Value value_of(const NodeSpec& node) {
    for (const char* refused : {"sparse_value", "value_string", "value_strings"}) {
      if (node.has(refused)) node.unsupported(std::string("the attribute '") + refused + "'");
    }
    int given = 0;
    for (const char* key : {"value", "value_float", "value_floats", "value_int", "value_ints"}) {
      given += node.has(key) ? 1 : 0;
    }
    if (given != 1) node.invalid("a Constant needs exactly one value attribute, it has " + std::to_string(given));
    if (const Value* v = node.get_tensor("value")) return *v;
    // ONNX's value_float(s) are float32 and value_int(s) int64.
    if (node.has("value_float")) {
      return Value::floating(
          Tensor::from_vector(std::vector<float>{static_cast<float>(node.get_float("value_float", 0))}, Shape{}));
    }
    if (node.has("value_floats")) {
      const std::vector<double> f = node.get_floats("value_floats");
      return Value::floating(
          Tensor::from_vector(std::vector<float>(f.begin(), f.end()), Shape{static_cast<std::int64_t>(f.size())}));
    }
    if (node.has("value_int")) return Value::integers({node.get_int("value_int", 0)}, Shape{});
    const Indices ints = node.get_ints("value_ints");
    return Value::integers(ints, Shape{static_cast<std::int64_t>(ints.size())});
  }

  Value value_;
};

// A Value of `shape` whose every element is `one`'s single element, of its type.
Value filled(const Shape& shape, const Value& one) {
  Tensor t = Tensor::empty(shape, one.tensor.dtype());
  visit_storage(t.dtype(), [&](auto tag) {
    using T = element_of<decltype(tag)>;
    std::fill_n(t.data<T>(), t.numel(), one.tensor.data<T>()[0]);
  });
  return typed(std::move(t), one.type);
}

class ConstantOfShape final : public NoGradientOp {
 public:
  explicit ConstantOfShape(const NodeSpec& node) : NoGradientOp(node) {
    if (const Value* v = node.get_tensor("value")) {
      if (v->numel() != 1) node.invalid("the value must hold one element, it is " + v->str());
      value_ = typed(v->tensor.contiguous(), v->type);
    } else {  // the default: float32 zero
      value_ = Value::floating(Tensor::zeros(Shape{}, DType::f32));
    }
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Indices shape = int_input(node_, inputs, 0, "the shape");
    remember(inputs);
    for (std::int64_t d : shape) {
      if (d < 0) node_.invalid("the shape " + shape_str(shape) + " has a negative dimension");
    }
    return {filled(shape, value_)};
  }

 private:
  Value value_;
};

class Range final : public NoGradientOp {
 public:
  using NoGradientOp::NoGradientOp;

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& start = input(node_, inputs, 0);
    for (std::size_t i = 0; i < 3; ++i) {
      const Value& v = input(node_, inputs, i);
      if (v.numel() != 1 || v.type != start.type) {
        node_.invalid("start, limit and delta must be scalars of one type, input " + std::to_string(i) + " is " +
                      v.str());
      }
    }
    remember(inputs);
    Value out;
    visit_storage(start.tensor.dtype(), [&](auto tag) {
      using T = element_of<decltype(tag)>;
      const T first = start.tensor.data<T>()[0];
      const T limit = inputs[1].tensor.data<T>()[0];
      const T delta = inputs[2].tensor.data<T>()[0];
      const std::int64_t n = count(first, limit, delta);
      Tensor t = Tensor::empty(Shape{n}, start.tensor.dtype());
      // start + i * delta, as ONNX defines it (not a running sum, which drifts in float).
      for (std::int64_t i = 0; i < n; ++i) t.data<T>()[i] = static_cast<T>(first + static_cast<T>(i) * delta);
      out = typed(std::move(t), start.type);
    });
    return {out};
  }

 private:
  // max(ceil((limit - start) / delta), 0), refusing a zero, NaN or overflowing step.
  template <class T>
  std::int64_t count(T start, T limit, T delta) const {
    if (delta == T(0)) node_.invalid("delta is 0");
    if constexpr (std::is_floating_point_v<T>) {
      // In T, as ONNX computes it, so an f32 range has the count ONNX Runtime gives it.
      const T n = std::ceil((limit - start) / delta);
      if (!(n < T(1e15))) {
        node_.invalid("the range from " + std::to_string(start) + " to " + std::to_string(limit) + " is too long");
      }
      return n > T(0) ? static_cast<std::int64_t>(n) : 0;
    } else {
      std::int64_t span = 0;
      if (__builtin_sub_overflow(limit, start, &span)) {
        node_.invalid("the range from " + std::to_string(start) + " to " + std::to_string(limit) + " overflows");
      }
      if ((span > 0) != (delta > 0) || span == 0) return 0;
      // Same signs: ceil(span / delta) without overflow.
      return span / delta + (span % delta != 0 ? 1 : 0);
    }
  }
};

template <class T>
void add(OpRegistry& registry, const std::string& op_type) {
  registry.add(op_type, [](const NodeSpec& node) { return std::make_unique<T>(node); });
}

}  // namespace

void register_constant_ops(OpRegistry& registry) {
  add<ShapeOf>(registry, "Shape");
  add<Size>(registry, "Size");
  add<Constant>(registry, "Constant");
  add<ConstantOfShape>(registry, "ConstantOfShape");
  add<Range>(registry, "Range");
}

}  // namespace tessera::onnx
