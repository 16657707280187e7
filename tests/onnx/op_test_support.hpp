#pragma once
// Shared pieces of the ONNX op tests: nodes built in code, deterministic inputs, and the
// one finite-difference check every op's backward is held to.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "onnx/op.hpp"

namespace tessera::onnx::test {

// A node of `op_type` with `n_inputs` inputs named in0, in1, ... ("" where `omitted`
// says so) and `n_outputs` outputs out0, out1, ...
inline NodeSpec make_node(const std::string& op_type, int n_inputs, int n_outputs = 1, int opset = 17) {
  NodeSpec node;
  node.name = "test_" + op_type;
  node.op_type = op_type;
  node.opset = opset;
  for (int i = 0; i < n_inputs; ++i) node.inputs.push_back("in" + std::to_string(i));
  for (int i = 0; i < n_outputs; ++i) node.outputs.push_back("out" + std::to_string(i));
  return node;
}

inline void set_int(NodeSpec& node, const std::string& key, std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::integer;
  a.i = v;
  node.attributes[key] = a;
}
inline void set_float(NodeSpec& node, const std::string& key, double v) {
  Attribute a;
  a.kind = Attribute::Kind::real;
  a.f = v;
  node.attributes[key] = a;
}
inline void set_string(NodeSpec& node, const std::string& key, const std::string& v) {
  Attribute a;
  a.kind = Attribute::Kind::string;
  a.s = v;
  node.attributes[key] = a;
}
inline void set_ints(NodeSpec& node, const std::string& key, const std::vector<std::int64_t>& v) {
  Attribute a;
  a.kind = Attribute::Kind::integers;
  a.ints = v;
  node.attributes[key] = a;
}
inline void set_floats(NodeSpec& node, const std::string& key, const std::vector<double>& v) {
  Attribute a;
  a.kind = Attribute::Kind::reals;
  a.floats = v;
  node.attributes[key] = a;
}

// Deterministic values in [-1, 1) (a small LCG), f32 or f64.
inline Value random_value(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<double>(s >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  }
  if (dtype == DType::f32) {
    return Value::floating(Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape));
  }
  return Value::floating(Tensor::from_vector(v, shape));
}

inline Value f64_value(const std::vector<double>& v, const Shape& shape) {
  return Value::floating(Tensor::from_vector(v, shape));
}

// The outputs of one forward of a fresh op made from `node`.
inline std::vector<Value> run(const NodeSpec& node, const std::vector<Value>& inputs) {
  return builtin_ops().create(node)->forward(inputs);
}

// 0, 1, 2, ... (from `start`) in f64: inputs whose every element is told apart.
inline Value iota_value(const Shape& shape, double start = 0.0) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), start);
  return f64_value(v, shape);
}

// x[i] = sin(0.37 i + 0.1) in f64: the inputs of the comparisons with values PyTorch
// computed (the script that made the expected values built its tensors the same way).
inline Value sine_value(const Shape& shape) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  return f64_value(v, shape);
}

// `got` has `shape` and each element is within `tol` of the expected one, relative to
// max(1, |expected|).
inline void expect_close_values(const Value& got, const Shape& shape, const std::vector<double>& expected,
                                double tol = 1e-12) {
  ASSERT_EQ(got.shape(), shape);
  const auto v = got.tensor.to_vector<double>();
  ASSERT_EQ(v.size(), expected.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(v[i], expected[i], tol * std::max(1.0, std::abs(expected[i]))) << "element " << i;
  }
}

// Checks `op`'s backward against central differences, in f64: the loss is
// sum_k sum(output_k * weight_k) with fixed pseudo-random weights, and every floating
// input the op calls differentiable is perturbed element by element. `inputs` must be
// f64. Tolerance is absolute on each gradient element, relative to max(1, |grad|).
inline void check_gradients(const NodeSpec& node, const std::vector<Value>& inputs, double tolerance = 1e-6,
                            double step = 1e-6) {
  const OpRegistry& ops = builtin_ops();
  auto loss_of = [&](const std::vector<Value>& in, std::vector<Tensor>* weights) {
    auto op = ops.create(node);
    const std::vector<Value> out = op->forward(in);
    double loss = 0.0;
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (!out[k].defined() || !is_floating(out[k].type)) continue;
      const Value w = random_value(out[k].shape(), 1000 + k);
      if (weights) weights->push_back(w.tensor);
      const auto o = out[k].tensor.to_vector<double>();
      const auto wv = w.tensor.to_vector<double>();
      for (std::size_t i = 0; i < o.size(); ++i) loss += o[i] * wv[i];
    }
    return loss;
  };
  auto op = ops.create(node);
  const std::vector<Value> out = op->forward(inputs);
  std::vector<Tensor> grad_out;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (!out[k].defined() || !is_floating(out[k].type)) {
      grad_out.emplace_back();
      continue;
    }
    grad_out.push_back(random_value(out[k].shape(), 1000 + k).tensor);
  }
  const std::vector<Tensor> grads = op->backward(grad_out);
  ASSERT_EQ(grads.size(), inputs.size()) << node.where() << ": one gradient per input";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !is_floating(inputs[i].type) || !op->differentiable_input(i)) continue;
    ASSERT_TRUE(grads[i].defined()) << node.where() << ": no gradient for input " << i;
    ASSERT_EQ(grads[i].shape(), inputs[i].shape()) << node.where() << ": gradient shape of input " << i;
    const auto analytic = grads[i].to_vector<double>();
    for (std::int64_t e = 0; e < inputs[i].numel(); ++e) {
      auto perturbed = [&](double delta) {
        std::vector<Value> in = inputs;
        in[i].tensor = inputs[i].tensor.clone();
        in[i].tensor.data<double>()[e] += delta;
        return loss_of(in, nullptr);
      };
      const double numeric = (perturbed(step) - perturbed(-step)) / (2 * step);
      const double a = analytic[static_cast<std::size_t>(e)];
      EXPECT_NEAR(a, numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << node.where() << ": d loss / d input " << i << "[" << e << "]";
    }
  }
}

}  // namespace tessera::onnx::test
