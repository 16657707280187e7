// The ONNX linear and convolution ops: Gemm, MatMul, Conv, ConvTranspose.
//
// Every product runs on the library's BLAS (ops::gemm on matrix views of the operands).
// Conv and ConvTranspose share one set of kernels: a Conv maps a "wide" field (its input)
// to a "narrow" one (its output) through im2col + GEMM, and its input gradient maps back
// through GEMM + col2im. ConvTranspose's forward is exactly that input gradient, and its
// input gradient is the Conv forward, with the weight laid out the same way in both
// ([narrow channels, wide channels / group, kernel...]).

#include <algorithm>
#include <string>

#include "onnx/broadcast.hpp"
#include "onnx/im2col_nd.hpp"
#include "onnx/op.hpp"
#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::onnx {

namespace {

// A row-major [rows, cols] matrix view of `data` for ops::gemm (no copy).
template <class T>
Tensor matrix(const T* data, std::int64_t rows, std::int64_t cols) {
  return Tensor::view(const_cast<T*>(data), {rows, cols}, dtype_of<T>);
}

void check_input_count(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t lo, std::size_t hi) {
  if (inputs.size() < lo || inputs.size() > hi) {
    node.invalid("expected " + std::to_string(lo) + (lo == hi ? "" : " to " + std::to_string(hi)) + " inputs, got " +
                 std::to_string(inputs.size()));
  }
}

void check_same_dtype(const NodeSpec& node, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) node.invalid("inputs of different types: " + a.str() + " and " + b.str());
}

// ---- Gemm: Y = alpha * op(A) op(B) + beta * C, C broadcast to [M, N].

class GemmOp final : public Op {
 public:
  explicit GemmOp(const NodeSpec& node) : Op(node) {
    // Gemm-6 and older carried a 'broadcast' attribute; opset 7 made broadcasting implicit.
    if (node.opset < 7) node.unsupported("Gemm before opset 7");
    alpha_ = node.get_float("alpha", 1.0);
    beta_ = node.get_float("beta", 1.0);
    trans_a_ = node.get_int("transA", 0) != 0;
    trans_b_ = node.get_int("transB", 0) != 0;
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    check_input_count(node_, inputs, 2, 3);
    a_ = floating_input(node_, inputs[0], "A");
    b_ = floating_input(node_, inputs[1], "B");
    check_same_dtype(node_, a_, b_);
    if (a_.dim() != 2 || b_.dim() != 2)
      node_.invalid("A and B must be matrices, got " + inputs[0].str() + ", " + inputs[1].str());
    const std::int64_t m = a_.size(trans_a_ ? 1 : 0), k = a_.size(trans_a_ ? 0 : 1);
    const std::int64_t kb = b_.size(trans_b_ ? 1 : 0), n = b_.size(trans_b_ ? 0 : 1);
    if (k != kb) node_.invalid("inner dimensions differ: " + inputs[0].str() + " and " + inputs[1].str());
    Tensor y = Tensor::zeros({m, n}, a_.dtype());
    c_shape_.reset();
    if (inputs.size() == 3 && inputs[2].defined() && beta_ != 0.0) {
      const Tensor& c = floating_input(node_, inputs[2], "C");
      check_same_dtype(node_, a_, c);
      if (broadcast_shapes(c.shape(), {m, n}, node_.where()) != Shape{m, n}) {
        node_.invalid("C " + inputs[2].str() + " does not broadcast to [M, N]");
      }
      c_shape_ = c.shape();
      // Y starts as C broadcast, then the product adds onto beta * C.
      visit_floating(y.dtype(), [&](auto zero) {
        using T = decltype(zero);
        const std::vector<std::int64_t> source = broadcast_source_index(c.shape(), {m, n});
        const T* cv = c.data<T>();
        T* yv = y.data<T>();
        for (std::size_t i = 0; i < source.size(); ++i) yv[i] = cv[source[i]];
      });
      ops::gemm(a_, trans_a_, b_, trans_b_, y, alpha_, beta_);
    } else {
      ops::gemm(a_, trans_a_, b_, trans_b_, y, alpha_, 0.0);
      if (inputs.size() == 3 && inputs[2].defined()) c_shape_ = inputs[2].shape();  // beta == 0: zero gradient
    }
    return {Value::floating(y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads(c_shape_ ? 3 : 2);
    if (grad_outputs.empty() || !grad_outputs[0].defined()) {
      grads[0] = Tensor::zeros(a_.shape(), a_.dtype());
      grads[1] = Tensor::zeros(b_.shape(), b_.dtype());
      if (c_shape_) grads[2] = Tensor::zeros(*c_shape_, a_.dtype());
      return grads;
    }
    const Tensor dy = grad_outputs[0].contiguous();
    grads[0] = Tensor::zeros(a_.shape(), a_.dtype());
    grads[1] = Tensor::zeros(b_.shape(), b_.dtype());
    // d op(A) = alpha dY op(B)^T and d op(B) = alpha op(A)^T dY, written straight into
    // the stored (possibly transposed) layouts.
    if (trans_a_)
      ops::gemm(b_, trans_b_, dy, true, grads[0], alpha_);
    else
      ops::gemm(dy, false, b_, !trans_b_, grads[0], alpha_);
    if (trans_b_)
      ops::gemm(dy, true, a_, trans_a_, grads[1], alpha_);
    else
      ops::gemm(a_, !trans_a_, dy, false, grads[1], alpha_);
    if (c_shape_) {
      grads[2] = reduce_to_shape(dy, *c_shape_);
      ops::scale(grads[2], beta_);
    }
    return grads;
  }

 private:
  double alpha_ = 1.0, beta_ = 1.0;
  bool trans_a_ = false, trans_b_ = false;
  Tensor a_, b_;
  std::optional<Shape> c_shape_;
};

// ---- MatMul with numpy semantics: a 1-D A is a row vector, a 1-D B a column vector (the
// added dim dropped from the result); the batch dims broadcast.

class MatMulOp final : public Op {
 public:
  using Op::Op;

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    check_input_count(node_, inputs, 2, 2);
    a_ = floating_input(node_, inputs[0], "A");
    b_ = floating_input(node_, inputs[1], "B");
    check_same_dtype(node_, a_, b_);
    if (a_.dim() == 0 || b_.dim() == 0) node_.invalid("MatMul of a scalar");
    a_shape_ = a_.dim() == 1 ? Shape{1, a_.size(0)} : a_.shape();
    b_shape_ = b_.dim() == 1 ? Shape{b_.size(0), 1} : b_.shape();
    m_ = a_shape_[a_shape_.size() - 2];
    k_ = a_shape_.back();
    n_ = b_shape_.back();
    if (b_shape_[b_shape_.size() - 2] != k_) {
      node_.invalid("inner dimensions differ: " + inputs[0].str() + " and " + inputs[1].str());
    }
    const Shape a_batch(a_shape_.begin(), a_shape_.end() - 2), b_batch(b_shape_.begin(), b_shape_.end() - 2);
    batch_ = broadcast_shapes(a_batch, b_batch, node_.where());
    a_source_ = broadcast_source_index(a_batch, batch_);
    b_source_ = broadcast_source_index(b_batch, batch_);
    Shape y_shape = batch_;
    if (a_.dim() > 1) y_shape.push_back(m_);
    if (b_.dim() > 1) y_shape.push_back(n_);
    Tensor y = Tensor::empty(y_shape, a_.dtype());
    visit_floating(y.dtype(), [&](auto zero) { forward_typed<decltype(zero)>(y); });
    return {Value::floating(y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    Tensor da = Tensor::zeros(a_.shape(), a_.dtype()), db = Tensor::zeros(b_.shape(), b_.dtype());
    if (!grad_outputs.empty() && grad_outputs[0].defined()) {
      const Tensor dy = grad_outputs[0].contiguous();
      visit_floating(dy.dtype(), [&](auto zero) { backward_typed<decltype(zero)>(dy, da, db); });
    }
    return {da, db};
  }

 private:
  // B shared by every batch (at most 2-D): A's batch folds into the rows of one GEMM.
  bool folds() const { return b_shape_.size() == 2; }

  template <class T>
  void forward_typed(Tensor& y) const {
    const T* a = a_.data<T>();
    const T* b = b_.data<T>();
    T* out = y.data<T>();
    if (folds()) {
      const std::int64_t rows = shape_numel(batch_) * m_;
      Tensor yv = matrix(out, rows, n_);
      ops::gemm(matrix(a, rows, k_), false, matrix(b, k_, n_), false, yv);
      return;
    }
    for (std::size_t i = 0; i < a_source_.size(); ++i) {
      Tensor yv = matrix(out + static_cast<std::int64_t>(i) * m_ * n_, m_, n_);
      ops::gemm(matrix(a + a_source_[i] * m_ * k_, m_, k_), false, matrix(b + b_source_[i] * k_ * n_, k_, n_), false,
                yv);
    }
  }

  // dA_i += dY_i B_i^T and dB_i += A_i^T dY_i; a broadcast operand sums over the batches
  // that shared it (beta = 1).
  template <class T>
  void backward_typed(const Tensor& dy_t, Tensor& da_t, Tensor& db_t) const {
    const T* a = a_.data<T>();
    const T* b = b_.data<T>();
    const T* dy = dy_t.data<T>();
    T* da = da_t.data<T>();
    T* db = db_t.data<T>();
    if (folds()) {
      const std::int64_t rows = shape_numel(batch_) * m_;
      Tensor dav = matrix(da, rows, k_), dbv = matrix(db, k_, n_);
      ops::gemm(matrix(dy, rows, n_), false, matrix(b, k_, n_), true, dav);
      ops::gemm(matrix(a, rows, k_), true, matrix(dy, rows, n_), false, dbv);
      return;
    }
    for (std::size_t i = 0; i < a_source_.size(); ++i) {
      const Tensor dyv = matrix(dy + static_cast<std::int64_t>(i) * m_ * n_, m_, n_);
      Tensor dav = matrix(da + a_source_[i] * m_ * k_, m_, k_);
      Tensor dbv = matrix(db + b_source_[i] * k_ * n_, k_, n_);
      ops::gemm(dyv, false, matrix(b + b_source_[i] * k_ * n_, k_, n_), true, dav, 1.0, 1.0);
      ops::gemm(matrix(a + a_source_[i] * m_ * k_, m_, k_), true, dyv, false, dbv, 1.0, 1.0);
    }
  }

  Tensor a_, b_;
  Shape a_shape_, b_shape_, batch_;
  std::int64_t m_ = 0, k_ = 0, n_ = 0;
  std::vector<std::int64_t> a_source_, b_source_;
};

// ---- The convolution kernels, once for Conv and ConvTranspose.
//
// A plan relates a wide field x [N, wide_channels, g.in...] to a narrow one
// y [N, narrow_channels, g.out...] through the window geometry g and a weight
// w [narrow_channels, wide_channels / groups, g.kernel...]: y = conv(x, w).

struct ConvPlan {
  WindowGeometry g;
  const std::vector<std::int64_t>* table = nullptr;  // window_sources(g)
  std::int64_t batch = 0, wide_channels = 0, narrow_channels = 0, groups = 1;

  std::int64_t wide_per_group() const { return wide_channels / groups; }
  std::int64_t narrow_per_group() const { return narrow_channels / groups; }
  std::int64_t rows_per_group() const { return wide_per_group() * g.taps(); }  // of the column matrix
};

// The positions of one sample go through the GEMMs in chunks: the column matrix of a
// whole large field (wide_channels * taps * positions) would take gigabytes, so a chunk
// holds as many positions as im2col_chunk_elements() allows (all of them for small fields
// and pointwise windows, whose columns are x itself).
std::int64_t chunk_positions(const ConvPlan& p) {
  const std::int64_t positions = p.g.positions();
  if (p.g.is_pointwise()) return positions;
  const std::int64_t per_position = std::max<std::int64_t>(1, p.wide_channels * p.g.taps());
  return std::clamp<std::int64_t>(im2col_chunk_elements() / per_position, 1, std::max<std::int64_t>(positions, 1));
}

// A chunk [begin, begin + size) of positions of sample n, with its column matrix
// [wide_channels * taps, size] and its narrow-side block [narrow_channels, size] (a view
// into the narrow field when the chunk is the whole sample, else a copy).
template <class T>
struct Chunk {
  std::int64_t n = 0, begin = 0, size = 0;
  const T* cols = nullptr;
  T* narrow = nullptr;
};

// Calls f(chunk) for every chunk of every sample: `wide` gives the columns (unless
// `with_columns` is false), `narrow` the narrow block (read into the block when
// `read_narrow`, written back from it after f when `write_narrow`).
template <class T, class F>
void for_each_chunk(const ConvPlan& p, const T* wide, T* narrow, bool with_columns, bool read_narrow, bool write_narrow,
                    F&& f) {
  const std::int64_t positions = p.g.positions(), step = chunk_positions(p);
  std::vector<T> cols, block;
  for (std::int64_t n = 0; n < p.batch; ++n) {
    const T* wide_n = wide ? wide + n * p.wide_channels * p.g.field_size() : nullptr;
    T* narrow_n = narrow + n * p.narrow_channels * positions;
    for (std::int64_t begin = 0; begin < positions; begin += step) {
      Chunk<T> c{n, begin, std::min(step, positions - begin), nullptr, narrow_n};
      const bool whole = c.size == positions;
      if (with_columns && p.g.is_pointwise()) {
        c.cols = wide_n;
      } else if (with_columns) {
        cols.resize(static_cast<std::size_t>(p.wide_channels * p.g.taps() * c.size));
        im2col_nd(wide_n, p.wide_channels, p.g, *p.table, begin, c.size, cols.data());
        c.cols = cols.data();
      }
      if (!whole) {
        block.resize(static_cast<std::size_t>(p.narrow_channels * c.size));
        c.narrow = block.data();
        for (std::int64_t ch = 0; read_narrow && ch < p.narrow_channels; ++ch) {
          std::copy_n(narrow_n + ch * positions + begin, c.size, block.data() + ch * c.size);
        }
      }
      f(c);
      for (std::int64_t ch = 0; !whole && write_narrow && ch < p.narrow_channels; ++ch) {
        std::copy_n(block.data() + ch * c.size, c.size, narrow_n + ch * positions + begin);
      }
    }
  }
}

// y = conv(x, w) (y is overwritten).
template <class T>
void conv_narrow_from_wide(const ConvPlan& p, const T* x, const T* w, T* y) {
  const std::int64_t rows = p.rows_per_group(), narrow = p.narrow_per_group();
  for_each_chunk(p, x, y, true, false, true, [&](const Chunk<T>& c) {
    for (std::int64_t gi = 0; gi < p.groups; ++gi) {
      Tensor yv = matrix(c.narrow + gi * narrow * c.size, narrow, c.size);
      ops::gemm(matrix(w + gi * narrow * rows, narrow, rows), false, matrix(c.cols + gi * rows * c.size, rows, c.size),
                false, yv);
    }
  });
}

// x += conv^T(y, w): the adjoint of conv_narrow_from_wide in x.
template <class T>
void conv_wide_from_narrow(const ConvPlan& p, const T* y, const T* w, T* x) {
  const std::int64_t rows = p.rows_per_group(), narrow = p.narrow_per_group();
  const bool pointwise = p.g.is_pointwise();
  std::vector<T> cols;
  for_each_chunk(p, static_cast<const T*>(nullptr), const_cast<T*>(y), false, true, false, [&](const Chunk<T>& c) {
    T* xn = x + c.n * p.wide_channels * p.g.field_size();
    // Pointwise: the columns are x itself (one chunk), so the GEMM accumulates into it.
    cols.resize(pointwise ? 0 : static_cast<std::size_t>(p.groups * rows * c.size));
    T* target = pointwise ? xn : cols.data();
    for (std::int64_t gi = 0; gi < p.groups; ++gi) {
      Tensor cv = matrix(target + gi * rows * c.size, rows, c.size);
      ops::gemm(matrix(w + gi * narrow * rows, narrow, rows), true,
                matrix(c.narrow + gi * narrow * c.size, narrow, c.size), false, cv, 1.0, pointwise ? 1.0 : 0.0);
    }
    if (!pointwise) col2im_add_nd(cols.data(), p.wide_channels, p.g, *p.table, c.begin, c.size, xn);
  });
}

// dw += the gradient of sum(conv(x, w) * y) in w.
template <class T>
void conv_weight_grad(const ConvPlan& p, const T* x, const T* y, T* dw) {
  const std::int64_t rows = p.rows_per_group(), narrow = p.narrow_per_group();
  for_each_chunk(p, x, const_cast<T*>(y), true, true, false, [&](const Chunk<T>& c) {
    for (std::int64_t gi = 0; gi < p.groups; ++gi) {
      Tensor dwv = matrix(dw + gi * narrow * rows, narrow, rows);
      ops::gemm(matrix(c.narrow + gi * narrow * c.size, narrow, c.size), false,
                matrix(c.cols + gi * rows * c.size, rows, c.size), true, dwv, 1.0, 1.0);
    }
  });
}

// The shape checks Conv and ConvTranspose share (X [N, C, spatial...] and W of X's rank,
// kernel_shape agreeing with W) and the kernel W gives; the channel checks differ and are
// each op's make_plan.
Shape checked_kernel(const NodeSpec& node, const Tensor& x, const Tensor& w) {
  if (x.dim() < 3) node.invalid("X must be [N, C, spatial...], got " + x.str());
  if (w.dim() != x.dim()) node.invalid("W " + w.str() + " and X " + x.str() + " differ in rank");
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (shape_numel(w.shape()) == 0) node.invalid("W " + w.str() + " is empty");
  if (node.has("kernel_shape") && node.get_ints("kernel_shape") != kernel) {
    node.invalid("attribute 'kernel_shape' disagrees with W " + w.str());
  }
  return kernel;
}

// The bias B [channels] of the output (the optional third input).
Tensor checked_bias(const NodeSpec& node, const std::vector<Value>& inputs, const Tensor& x, std::int64_t channels) {
  if (inputs.size() < 3 || !inputs[2].defined()) return {};
  const Tensor& b = floating_input(node, inputs[2], "B");
  check_same_dtype(node, x, b);
  if (b.shape() != Shape{channels}) node.invalid("B must be [" + std::to_string(channels) + "], got " + b.str());
  return b;
}

// A Conv or ConvTranspose: the plan, the cached operands, the bias and which side of the
// plan the node's input is.
class ConvFamilyOp : public Op {
 public:
  explicit ConvFamilyOp(const NodeSpec& node) : Op(node) {
    groups_ = node.get_int("group", 1);
    if (groups_ < 1) node.invalid("group < 1");
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    check_input_count(node_, inputs, 2, 3);
    x_ = floating_input(node_, inputs[0], "X");
    w_ = floating_input(node_, inputs[1], "W");
    check_same_dtype(node_, x_, w_);
    plan_ = make_plan(checked_kernel(node_, x_, w_));
    plan_.table = &table_.of(plan_.g);
    const Shape& out_field = transposed() ? plan_.g.in : plan_.g.out;
    const std::int64_t out_channels = transposed() ? plan_.wide_channels : plan_.narrow_channels;
    has_bias_ = false;
    Tensor b = checked_bias(node_, inputs, x_, out_channels);
    Shape y_shape{plan_.batch, out_channels};
    y_shape.insert(y_shape.end(), out_field.begin(), out_field.end());
    // Conv overwrites y; ConvTranspose adds each input's window into it.
    Tensor y = transposed() ? Tensor::zeros(y_shape, x_.dtype()) : Tensor::empty(y_shape, x_.dtype());
    visit_floating(x_.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (transposed())
        conv_wide_from_narrow(plan_, x_.data<T>(), w_.data<T>(), y.data<T>());
      else
        conv_narrow_from_wide(plan_, x_.data<T>(), w_.data<T>(), y.data<T>());
    });
    if (b.defined()) {
      ops::add_bias(y, b, 1);
      has_bias_ = true;
    }
    return {Value::floating(y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads{Tensor::zeros(x_.shape(), x_.dtype()), Tensor::zeros(w_.shape(), w_.dtype())};
    const std::int64_t out_channels = transposed() ? plan_.wide_channels : plan_.narrow_channels;
    if (has_bias_) grads.push_back(Tensor::zeros({out_channels}, x_.dtype()));
    if (grad_outputs.empty() || !grad_outputs[0].defined()) return grads;
    const Tensor dy = grad_outputs[0].contiguous();
    visit_floating(x_.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* x = x_.data<T>();
      const T* w = w_.data<T>();
      const T* g = dy.data<T>();
      if (transposed()) {
        conv_narrow_from_wide(plan_, g, w, grads[0].data<T>());
        conv_weight_grad(plan_, g, x, grads[1].data<T>());
      } else {
        conv_wide_from_narrow(plan_, g, w, grads[0].data<T>());
        conv_weight_grad(plan_, x, g, grads[1].data<T>());
      }
    });
    if (has_bias_) ops::accumulate_bias_grad(dy, grads[2], 1);
    return grads;
  }

 protected:
  virtual bool transposed() const = 0;
  virtual ConvPlan make_plan(const Shape& kernel) = 0;

  std::int64_t groups_ = 1;
  Tensor x_, w_;

 private:
  ConvPlan plan_;
  WindowTable table_;
  bool has_bias_ = false;
};

class ConvOp final : public ConvFamilyOp {
 public:
  using ConvFamilyOp::ConvFamilyOp;

 private:
  bool transposed() const override { return false; }

  ConvPlan make_plan(const Shape& kernel) override {
    ConvPlan p;
    p.batch = x_.size(0);
    p.wide_channels = x_.size(1);
    p.narrow_channels = w_.size(0);
    p.groups = groups_;
    if (p.wide_channels != w_.size(1) * groups_ || p.narrow_channels % groups_ != 0) {
      node_.invalid("X " + x_.str() + " and W " + w_.str() + " do not agree with group " + std::to_string(groups_));
    }
    p.g = window_geometry(node_, Shape(x_.shape().begin() + 2, x_.shape().end()), kernel, false);
    return p;
  }
};

class ConvTransposeOp final : public ConvFamilyOp {
 public:
  using ConvFamilyOp::ConvFamilyOp;

 private:
  bool transposed() const override { return true; }

  ConvPlan make_plan(const Shape& kernel) override {
    ConvPlan p;
    p.batch = x_.size(0);
    p.narrow_channels = x_.size(1);
    p.wide_channels = w_.size(1) * groups_;
    p.groups = groups_;
    if (p.narrow_channels != w_.size(0) || p.narrow_channels % groups_ != 0) {
      node_.invalid("X " + x_.str() + " and W " + w_.str() + " do not agree with group " + std::to_string(groups_));
    }
    p.g = transposed_geometry(Shape(x_.shape().begin() + 2, x_.shape().end()), kernel);
    return p;
  }

  // The geometry of the Conv whose input gradient this ConvTranspose is: its window
  // positions are X's field, its wide field the output, whose extent comes from
  // output_shape (pads then derived) or from the pads (explicit or auto_pad).
  WindowGeometry transposed_geometry(const Shape& in, const Shape& kernel) const {
    const std::size_t rank = in.size();
    auto per_dim = [&](const std::string& key, std::int64_t fallback) {
      Shape v = node_.get_ints(key, Shape(rank, fallback));
      if (v.size() != rank) node_.invalid("attribute '" + key + "' needs one entry per spatial dim");
      return v;
    };
    WindowGeometry g;
    g.out = in;
    g.kernel = kernel;
    g.stride = per_dim("strides", 1);
    g.dilation = per_dim("dilations", 1);
    const Shape output_padding = per_dim("output_padding", 0);
    const std::string auto_pad = node_.get_string("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
      node_.unsupported("auto_pad '" + auto_pad + "'");
    }
    Shape pads = auto_pad == "NOTSET" ? node_.get_ints("pads", Shape(2 * rank, 0)) : Shape(2 * rank, 0);
    if (pads.size() != 2 * rank) node_.invalid("attribute 'pads' needs two entries per spatial dim");
    Shape output_shape = node_.get_ints("output_shape");
    if (output_shape.size() == rank + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
    if (!output_shape.empty() && output_shape.size() != rank)
      node_.invalid("attribute 'output_shape' has the wrong rank");
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    g.in.resize(rank);
    g.pad_begin.resize(rank);
    g.pad_end.resize(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t full = g.stride[d] * (in[d] - 1) + output_padding[d] + (kernel[d] - 1) * g.dilation[d] + 1;
      if (output_shape.empty() && !same) {
        g.pad_begin[d] = pads[d];
        g.pad_end[d] = pads[rank + d];
        g.in[d] = full - pads[d] - pads[rank + d];
      } else {
        // The padding that trims the full output to the requested extent, split with
        // the odd element at the end for SAME_UPPER and at the beginning otherwise
        // (floor division: a negative total pads the output with zeros).
        g.in[d] = output_shape.empty() ? in[d] * g.stride[d] : output_shape[d];
        const std::int64_t total = full - g.in[d];
        const std::int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        g.pad_begin[d] = auto_pad == "SAME_UPPER" ? half : total - half;
        g.pad_end[d] = total - g.pad_begin[d];
      }
      if (g.in[d] < 1) node_.invalid("the output would be empty");
    }
    return g;
  }
};

template <class OpType>
OpFactory factory() {
  return [](const NodeSpec& node) -> std::unique_ptr<Op> { return std::make_unique<OpType>(node); };
}

}  // namespace

void register_linear_conv_ops(OpRegistry& registry) {
  registry.add("Gemm", factory<GemmOp>());
  registry.add("MatMul", factory<MatMulOp>());
  registry.add("Conv", factory<ConvOp>());
  registry.add("ConvTranspose", factory<ConvTransposeOp>());
}

}  // namespace tessera::onnx
