// The elementwise ONNX ops of one input: the functions and activations (Sqrt, Exp, Erf,
// Sigmoid, Tanh, Relu, Gelu, ...), each a Math struct with its value and its slope run by
// the one UnaryOp<Math>. Floating values compute in their own precision (T is float or
// double); Neg, Abs, Sign and Relu also run on integer values in their int64 storage.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>

#include "onnx/op.hpp"
#include "onnx/typed.hpp"

namespace tessera::onnx {
namespace {

using detail::check_input_count;
using detail::dispatch;
using detail::required_input;
using detail::tensor_from;

// ---------------------------------------------------------------------------------------
// Unary ops. A Math struct gives value(x) and slope(x, y) (dy/dx from the input and the
// output), templates on T; `integers` says whether it also runs on integer values.

struct UnaryParams {
  double alpha = 0.0;
  double beta = 0.0;
};

struct FloatingOnly {
  static constexpr bool integers = false;
  static UnaryParams params(const NodeSpec&) { return {}; }
};

struct Sqrt : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::sqrt(x); }
  template <class T> static T slope(T, T y, const UnaryParams&) { return T(0.5) / y; }
};
struct Reciprocal : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return T(1) / x; }
  template <class T> static T slope(T, T y, const UnaryParams&) { return -y * y; }
};
struct Erf : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::erf(x); }
  template <class T> static T slope(T x, T, const UnaryParams&) {
    return T(2) / std::sqrt(std::numbers::pi_v<T>) * std::exp(-x * x);
  }
};
struct Exp : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::exp(x); }
  template <class T> static T slope(T, T y, const UnaryParams&) { return y; }
};
struct Log : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::log(x); }
  template <class T> static T slope(T x, T, const UnaryParams&) { return T(1) / x; }
};
struct Sigmoid : FloatingOnly {
  // Written per sign so exp never overflows.
  template <class T> static T value(T x, const UnaryParams&) {
    if (x >= 0) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <class T> static T slope(T, T y, const UnaryParams&) { return y * (T(1) - y); }
};
struct Tanh : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::tanh(x); }
  template <class T> static T slope(T, T y, const UnaryParams&) { return T(1) - y * y; }
};
struct Softplus : FloatingOnly {
  // log(1 + e^x) without overflow: x + log1p(e^-x) for positive x.
  template <class T> static T value(T x, const UnaryParams&) {
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  template <class T> static T slope(T x, T, const UnaryParams& p) { return Sigmoid::value(x, p); }
};
struct Softsign : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return x / (T(1) + std::abs(x)); }
  template <class T> static T slope(T x, T, const UnaryParams&) {
    const T d = T(1) + std::abs(x);
    return T(1) / (d * d);
  }
};
struct LeakyRelu : FloatingOnly {
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("alpha", 0.01), 0.0}; }
  template <class T> static T value(T x, const UnaryParams& p) { return x >= 0 ? x : T(p.alpha) * x; }
  template <class T> static T slope(T x, T, const UnaryParams& p) { return x >= 0 ? T(1) : T(p.alpha); }
};
struct Elu : FloatingOnly {
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("alpha", 1.0), 0.0}; }
  template <class T> static T value(T x, const UnaryParams& p) { return x > 0 ? x : T(p.alpha) * std::expm1(x); }
  template <class T> static T slope(T x, T y, const UnaryParams& p) { return x > 0 ? T(1) : y + T(p.alpha); }
};
struct Selu : FloatingOnly {
  // ONNX's defaults are the float32 values of SELU's constants.
  static UnaryParams params(const NodeSpec& node) {
    return {node.get_float("alpha", 1.67326319217681884765625), node.get_float("gamma", 1.05070102214813232421875)};
  }
  template <class T> static T value(T x, const UnaryParams& p) {
    return T(p.beta) * (x > 0 ? x : T(p.alpha) * std::expm1(x));
  }
  template <class T> static T slope(T x, T, const UnaryParams& p) {
    return T(p.beta) * (x > 0 ? T(1) : T(p.alpha) * std::exp(x));
  }
};
struct HardSigmoid : FloatingOnly {
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("alpha", 0.2), node.get_float("beta", 0.5)}; }
  template <class T> static T value(T x, const UnaryParams& p) {
    return std::clamp(T(p.alpha) * x + T(p.beta), T(0), T(1));
  }
  template <class T> static T slope(T x, T, const UnaryParams& p) {
    const T z = T(p.alpha) * x + T(p.beta);
    return z > 0 && z < 1 ? T(p.alpha) : T(0);
  }
};
struct HardSwish : FloatingOnly {
  // x * HardSigmoid(x) with alpha 1/6, beta 1/2 (opset 14).
  template <class T> static T value(T x, const UnaryParams&) { return x * std::clamp(x / T(6) + T(0.5), T(0), T(1)); }
  template <class T> static T slope(T x, T, const UnaryParams&) {
    if (x <= T(-3)) return T(0);
    if (x >= T(3)) return T(1);
    return x / T(3) + T(0.5);
  }
};
struct Gelu : FloatingOnly {
  // alpha = 1 for approximate="tanh", 0 for the exact (erf) form.
  static UnaryParams params(const NodeSpec& node) {
    const std::string approximate = node.get_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh") node.unsupported("approximate='" + approximate + "'");
    return {approximate == "tanh" ? 1.0 : 0.0, 0.0};
  }
  template <class T> static T value(T x, const UnaryParams& p) {
    if (p.alpha != 0) return T(0.5) * x * (T(1) + std::tanh(inner(x)));
    return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
  }
  template <class T> static T slope(T x, T, const UnaryParams& p) {
    if (p.alpha != 0) {
      const T t = std::tanh(inner(x));
      const T d_inner = std::sqrt(T(2) / std::numbers::pi_v<T>) * (T(1) + T(3 * 0.044715) * x * x);
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * d_inner;
    }
    return T(0.5) * (T(1) + std::erf(x / std::sqrt(T(2)))) + x * std::exp(-x * x / T(2)) / std::sqrt(T(2) * std::numbers::pi_v<T>);
  }
  template <class T> static T inner(T x) { return std::sqrt(T(2) / std::numbers::pi_v<T>) * (x + T(0.044715) * x * x * x); }
};
struct Celu : FloatingOnly {
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("alpha", 1.0), 0.0}; }
  template <class T> static T value(T x, const UnaryParams& p) { return x > 0 ? x : T(p.alpha) * std::expm1(x / T(p.alpha)); }
  template <class T> static T slope(T x, T, const UnaryParams& p) { return x > 0 ? T(1) : std::exp(x / T(p.alpha)); }
};
struct ThresholdedRelu : FloatingOnly {
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("alpha", 1.0), 0.0}; }
  template <class T> static T value(T x, const UnaryParams& p) { return x > T(p.alpha) ? x : T(0); }
  template <class T> static T slope(T x, T, const UnaryParams& p) { return x > T(p.alpha) ? T(1) : T(0); }
};
struct Shrink : FloatingOnly {
  // alpha = lambd, beta = bias.
  static UnaryParams params(const NodeSpec& node) { return {node.get_float("lambd", 0.5), node.get_float("bias", 0.0)}; }
  template <class T> static T value(T x, const UnaryParams& p) {
    return x < -T(p.alpha) ? x + T(p.beta) : x > T(p.alpha) ? x - T(p.beta) : T(0);
  }
  template <class T> static T slope(T x, T, const UnaryParams& p) { return std::abs(x) > T(p.alpha) ? T(1) : T(0); }
};
struct Mish : FloatingOnly {
  // x tanh(softplus(x)); d/dx = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
  template <class T> static T value(T x, const UnaryParams& p) { return x * std::tanh(Softplus::value(x, p)); }
  template <class T> static T slope(T x, T, const UnaryParams& p) {
    const T t = std::tanh(Softplus::value(x, p));
    return t + x * Sigmoid::value(x, p) * (T(1) - t * t);
  }
};
// The piecewise-constant functions: their derivative is zero where it exists (PyTorch's too).
struct Floor : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::floor(x); }
  template <class T> static T slope(T, T, const UnaryParams&) { return T(0); }
};
struct Ceil : FloatingOnly {
  template <class T> static T value(T x, const UnaryParams&) { return std::ceil(x); }
  template <class T> static T slope(T, T, const UnaryParams&) { return T(0); }
};
struct Round : FloatingOnly {
  // Half to even, as ONNX says: nearbyint in the default rounding mode.
  template <class T> static T value(T x, const UnaryParams&) { return std::nearbyint(x); }
  template <class T> static T slope(T, T, const UnaryParams&) { return T(0); }
};

// The ones that also run on integers.
struct AnyNumber : FloatingOnly {
  static constexpr bool integers = true;
};
struct Neg : AnyNumber {
  template <class T> static T value(T x, const UnaryParams&) { return -x; }
  template <class T> static T slope(T, T, const UnaryParams&) { return T(-1); }
};
struct Abs : AnyNumber {
  template <class T> static T value(T x, const UnaryParams&) { return x < 0 ? -x : x; }
  template <class T> static T slope(T x, T, const UnaryParams&) { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
};
struct Sign : AnyNumber {
  template <class T> static T value(T x, const UnaryParams&) { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
  template <class T> static T slope(T, T, const UnaryParams&) { return T(0); }
};
struct Relu : AnyNumber {
  template <class T> static T value(T x, const UnaryParams&) { return x > 0 ? x : T(0); }
  template <class T> static T slope(T x, T, const UnaryParams&) { return x > 0 ? T(1) : T(0); }
};

template <class Math>
class UnaryOp final : public Op {
 public:
  explicit UnaryOp(const NodeSpec& node) : Op(node), params_(Math::params(node)) { check_input_count(node, 1, 1); }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    x_ = required_input(node_, inputs, 0);
    y_ = detail::make_value(x_.shape(), x_.type);
    dispatch<Math::integers>(node_, x_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = x_.tensor.data<T>();
      T* y = y_.tensor.data<T>();
      for (std::int64_t i = 0, i_end = x_.numel(); i < i_end; ++i) {
        if constexpr (std::is_integral_v<T>) {
          y[i] = detail::wrap_integer(x_.type, Math::value(x[i], params_));
        } else {
          y[i] = Math::value(x[i], params_);
        }
      }
    });
    return {y_};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (grad_outputs.empty() || !grad_outputs[0].defined() || !is_floating(x_.type)) return {Tensor()};
    return {dispatch<false>(node_, x_.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = x_.tensor.data<T>();
      const T* y = y_.tensor.data<T>();
      const Tensor g = grad_outputs[0].contiguous();
      const T* gp = g.data<T>();
      return tensor_from<T>(x_.shape(), [&](std::int64_t i) { return gp[i] * Math::slope(x[i], y[i], params_); });
    })};
  }

 private:
  UnaryParams params_;
  Value x_, y_;
};

template <class OpClass, class... Args>
OpFactory factory(Args... args) {
  return [=](const NodeSpec& node) -> std::unique_ptr<Op> { return std::make_unique<OpClass>(node, args...); };
}

}  // namespace

void register_unary_ops(OpRegistry& registry) {
  registry.add("Sqrt", factory<UnaryOp<Sqrt>>());
  registry.add("Reciprocal", factory<UnaryOp<Reciprocal>>());
  registry.add("Erf", factory<UnaryOp<Erf>>());
  registry.add("Exp", factory<UnaryOp<Exp>>());
  registry.add("Log", factory<UnaryOp<Log>>());
  registry.add("Sigmoid", factory<UnaryOp<Sigmoid>>());
  registry.add("Tanh", factory<UnaryOp<Tanh>>());
  registry.add("Softplus", factory<UnaryOp<Softplus>>());
  registry.add("Softsign", factory<UnaryOp<Softsign>>());
  registry.add("LeakyRelu", factory<UnaryOp<LeakyRelu>>());
  registry.add("Elu", factory<UnaryOp<Elu>>());
  registry.add("Selu", factory<UnaryOp<Selu>>());
  registry.add("HardSigmoid", factory<UnaryOp<HardSigmoid>>());
  registry.add("HardSwish", factory<UnaryOp<HardSwish>>());
  registry.add("Gelu", factory<UnaryOp<Gelu>>());
  registry.add("Celu", factory<UnaryOp<Celu>>());
  registry.add("ThresholdedRelu", factory<UnaryOp<ThresholdedRelu>>());
  registry.add("Shrink", factory<UnaryOp<Shrink>>());
  registry.add("Mish", factory<UnaryOp<Mish>>());
  registry.add("Floor", factory<UnaryOp<Floor>>());
  registry.add("Ceil", factory<UnaryOp<Ceil>>());
  registry.add("Round", factory<UnaryOp<Round>>());
  registry.add("Neg", factory<UnaryOp<Neg>>());
  registry.add("Abs", factory<UnaryOp<Abs>>());
  registry.add("Sign", factory<UnaryOp<Sign>>());
  registry.add("Relu", factory<UnaryOp<Relu>>());
}

}  // namespace tessera::onnx
