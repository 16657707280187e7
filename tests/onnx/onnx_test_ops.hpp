#pragma once
// Tiny ops of the graph tests' own (op types "T..."), so the reader, the executor and
// OnnxModel are tested independently of the real op families: elementwise Mul, Add,
// Tanh, a 2-D MatMul, Shape and Reshape (integer values), a two-output split and a
// scale whose factor input is not differentiable.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "onnx/op.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::test {

inline std::vector<double> doubles_of(const Tensor& t) {
  if (t.dtype() == DType::f32) {
    const std::vector<float> v = t.to_vector<float>();
    return {v.begin(), v.end()};
  }
  return t.to_vector<double>();
}

inline Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dtype) {
  if (dtype == DType::f32) return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
  return Tensor::from_vector(v, shape);
}

// y = f(a, b) elementwise on same-shape floating inputs, with its partial derivatives.
class BinaryTestOp : public Op {
 public:
  enum class Kind { mul, add };
  BinaryTestOp(const NodeSpec& node, Kind kind) : Op(node), kind_(kind) {}
  std::vector<Value> forward(const std::vector<Value>& in) override {
    if (in.size() != 2 || in[0].shape() != in[1].shape()) node_.invalid("two inputs of one shape expected");
    a_ = doubles_of(in[0].tensor);
    b_ = doubles_of(in[1].tensor);
    shape_ = in[0].shape();
    dtype_ = in[0].tensor.dtype();
    std::vector<double> y(a_.size());
    for (std::size_t k = 0; k < y.size(); ++k) y[k] = kind_ == Kind::mul ? a_[k] * b_[k] : a_[k] + b_[k];
    return {Value::floating(tensor_of(y, shape_, dtype_))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const std::vector<double> dy = doubles_of(g[0]);
    std::vector<double> da(dy.size()), db(dy.size());
    for (std::size_t k = 0; k < dy.size(); ++k) {
      da[k] = kind_ == Kind::mul ? dy[k] * b_[k] : dy[k];
      db[k] = kind_ == Kind::mul ? dy[k] * a_[k] : dy[k];
    }
    return {tensor_of(da, shape_, dtype_), tensor_of(db, shape_, dtype_)};
  }

 private:
  Kind kind_;
  std::vector<double> a_, b_;
  Shape shape_;
  DType dtype_ = DType::f64;
};

class TanhTestOp : public Op {
 public:
  using Op::Op;
  std::vector<Value> forward(const std::vector<Value>& in) override {
    std::vector<double> y = doubles_of(in[0].tensor);
    for (double& v : y) v = std::tanh(v);
    y_ = y;
    shape_ = in[0].shape();
    dtype_ = in[0].tensor.dtype();
    return {Value::floating(tensor_of(y, shape_, dtype_))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    std::vector<double> dx = doubles_of(g[0]);
    for (std::size_t k = 0; k < dx.size(); ++k) dx[k] *= 1.0 - y_[k] * y_[k];
    return {tensor_of(dx, shape_, dtype_)};
  }

 private:
  std::vector<double> y_;
  Shape shape_;
  DType dtype_ = DType::f64;
};

// [m, k] x [k, n].
class MatMulTestOp : public Op {
 public:
  using Op::Op;
  std::vector<Value> forward(const std::vector<Value>& in) override {
    a_ = doubles_of(in[0].tensor);
    b_ = doubles_of(in[1].tensor);
    m_ = in[0].shape()[0];
    k_ = in[0].shape()[1];
    n_ = in[1].shape()[1];
    dtype_ = in[0].tensor.dtype();
    std::vector<double> y(static_cast<std::size_t>(m_ * n_), 0.0);
    for (std::int64_t i = 0; i < m_; ++i)
      for (std::int64_t j = 0; j < n_; ++j)
        for (std::int64_t p = 0; p < k_; ++p) y[i * n_ + j] += a_[i * k_ + p] * b_[p * n_ + j];
    return {Value::floating(tensor_of(y, {m_, n_}, dtype_))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const std::vector<double> dy = doubles_of(g[0]);
    std::vector<double> da(a_.size(), 0.0), db(b_.size(), 0.0);
    for (std::int64_t i = 0; i < m_; ++i)
      for (std::int64_t j = 0; j < n_; ++j)
        for (std::int64_t p = 0; p < k_; ++p) {
          da[i * k_ + p] += dy[i * n_ + j] * b_[p * n_ + j];
          db[p * n_ + j] += dy[i * n_ + j] * a_[i * k_ + p];
        }
    return {tensor_of(da, {m_, k_}, dtype_), tensor_of(db, {k_, n_}, dtype_)};
  }

 private:
  std::vector<double> a_, b_;
  std::int64_t m_ = 0, k_ = 0, n_ = 0;
  DType dtype_ = DType::f64;
};

class ShapeTestOp : public Op {
 public:
  using Op::Op;
  bool differentiable_input(std::size_t) const override { return false; }
  std::vector<Value> forward(const std::vector<Value>& in) override {
    const Shape& s = in[0].shape();
    return {Value::integers(s, {static_cast<std::int64_t>(s.size())})};
  }
};

// Reshape(data, shape): the shape is an integer value, not differentiable.
class ReshapeTestOp : public Op {
 public:
  using Op::Op;
  bool differentiable_input(std::size_t index) const override { return index == 0; }
  std::vector<Value> forward(const std::vector<Value>& in) override {
    shape_ = in[0].shape();
    return {Value::floating(in[0].tensor.clone().reshape(in[1].to_ints(node_.where())))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {g[0].clone().reshape(shape_), Tensor()};
  }

 private:
  Shape shape_;
};

// x * s where the scalar factor s is a constant (not differentiable, even when floating).
class ScaleTestOp : public Op {
 public:
  using Op::Op;
  bool differentiable_input(std::size_t index) const override { return index == 0; }
  std::vector<Value> forward(const std::vector<Value>& in) override {
    s_ = doubles_of(in[1].tensor).at(0);
    std::vector<double> y = doubles_of(in[0].tensor);
    for (double& v : y) v *= s_;
    return {Value::floating(tensor_of(y, in[0].shape(), in[0].tensor.dtype()))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    std::vector<double> dx = doubles_of(g[0]);
    for (double& v : dx) v *= s_;
    return {tensor_of(dx, g[0].shape(), g[0].dtype()), Tensor()};
  }

 private:
  double s_ = 1.0;
};

// Splits dim 0 into two halves: two outputs, either of which may go unused.
class Split2TestOp : public Op {
 public:
  using Op::Op;
  std::vector<Value> forward(const std::vector<Value>& in) override {
    shape_ = in[0].shape();
    dtype_ = in[0].tensor.dtype();
    const std::int64_t half = shape_[0] / 2;
    return {Value::floating(in[0].tensor.narrow(0, 0, half).contiguous()),
            Value::floating(in[0].tensor.narrow(0, half, shape_[0] - half).contiguous())};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor dx = Tensor::zeros(shape_, dtype_);
    const std::int64_t half = shape_[0] / 2;
    if (g[0].defined()) dx.narrow(0, 0, half).copy_from(g[0]);
    if (g[1].defined()) dx.narrow(0, half, shape_[0] - half).copy_from(g[1]);
    return {dx};
  }

 private:
  Shape shape_;
  DType dtype_ = DType::f64;
};

inline const OpRegistry& test_ops() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    r.add("TMul", [](const NodeSpec& n) { return std::make_unique<BinaryTestOp>(n, BinaryTestOp::Kind::mul); });
    r.add("TAdd", [](const NodeSpec& n) { return std::make_unique<BinaryTestOp>(n, BinaryTestOp::Kind::add); });
    r.add("TTanh", [](const NodeSpec& n) { return std::make_unique<TanhTestOp>(n); });
    r.add("TMatMul", [](const NodeSpec& n) { return std::make_unique<MatMulTestOp>(n); });
    r.add("TShape", [](const NodeSpec& n) { return std::make_unique<ShapeTestOp>(n); });
    r.add("TReshape", [](const NodeSpec& n) { return std::make_unique<ReshapeTestOp>(n); });
    r.add("TScale", [](const NodeSpec& n) { return std::make_unique<ScaleTestOp>(n); });
    r.add("TSplit2", [](const NodeSpec& n) { return std::make_unique<Split2TestOp>(n); });
    return r;
  }();
  return registry;
}

}  // namespace tessera::onnx::test
