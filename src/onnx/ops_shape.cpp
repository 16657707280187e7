// The shape ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile, Slice,
// Gather, GatherElements, Concat, Split (Shape, Size, Constant, ConstantOfShape and Range:
// ops_constant.cpp; what both share: shape_family.hpp).
//
// They run on every element type: a graph's shape arithmetic (Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape) is int64, so each op moves elements of whatever storage
// the value has (f32, f64 or i64) and keeps the file's element type. Gradients flow to
// floating inputs only.
//
// Three mechanisms carry the family:
//  - a view (Reshape, Flatten, Squeeze, Unsqueeze): the same elements under a new shape,
//    sharing storage (values are never written after their op made them);
//  - an index map (Transpose, Expand, Tile, Slice, Gather, GatherElements): every output
//    element copies one input element, so backward scatter-adds along the same map, which
//    also sums the gradients of elements read twice (Expand, Tile, repeated indices);
//  - blocks along an axis (Concat, Split), each the other's backward.
#include "onnx/shape_family.hpp"

namespace tessera::onnx {

namespace {

using namespace shape_family;

// ---- Views: Reshape, Flatten, Squeeze, Unsqueeze ----------------------------------------

class ViewOp : public ShapeFamilyOp {
 public:
  using ShapeFamilyOp::ShapeFamilyOp;
  std::vector<Value> forward(const std::vector<Value>& inputs) final {
    const Value& x = input(node_, inputs, 0);
    remember(inputs);
    return {typed(x.tensor.contiguous().reshape(out_shape(x.shape(), inputs)), x.type)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) final {
    // A copy, not a view: the caller may accumulate into the gradient it is given.
    const Shape& in = shapes_.at(0);
    return first_only(grad_or_zeros(grad_outputs, 0, in).reshape(in).clone());
  }

 protected:
  virtual Shape out_shape(const Shape& in, const std::vector<Value>& inputs) const = 0;
};

class Reshape final : public ViewOp {
 public:
  explicit Reshape(const NodeSpec& node) : ViewOp(node), allow_zero_(node.get_int("allowzero", 0) != 0) {
    if (node.opset < 5) node.unsupported("Reshape before opset 5 (the shape as an attribute)");
  }

 private:
  Shape out_shape(const Shape& in, const std::vector<Value>& inputs) const override {
    const Indices spec = int_input(node_, inputs, 1, "the shape");
    Shape out(spec.size(), 1);  // the -1 counts as 1 until inferred
    std::optional<std::size_t> inferred;
    for (std::size_t k = 0; k < spec.size(); ++k) {
      if (spec[k] == -1) {
        if (inferred) node_.invalid("the shape " + shape_str(spec) + " has more than one -1");
        inferred = k;
        continue;
      }
      if (spec[k] < -1) node_.invalid("the shape " + shape_str(spec) + " has a negative dimension");
      // 0 copies the input's dimension unless allowzero asks for an empty dimension.
      if (spec[k] == 0 && !allow_zero_) {
        if (k >= in.size()) {
          node_.invalid("the shape " + shape_str(spec) + " copies dimension " + std::to_string(k) +
                        " of an input of rank " + std::to_string(in.size()));
        }
        out[k] = in[k];
      } else {
        out[k] = spec[k];
      }
    }
    const std::int64_t known = count_of(node_, out, "the shape");
    const std::int64_t n = shape_numel(in);
    if (inferred) {
      if (known == 0 || n % known != 0) {
        node_.invalid("cannot infer the -1 of " + shape_str(spec) + " for an input of shape " + shape_str(in));
      }
      out[*inferred] = n / known;
    } else if (known != n) {
      node_.invalid("cannot reshape " + shape_str(in) + " to " + shape_str(spec));
    }
    return out;
  }

  bool allow_zero_;
};

class Flatten final : public ViewOp {
 public:
  explicit Flatten(const NodeSpec& node) : ViewOp(node), axis_(node.get_int("axis", 1)) {}

 private:
  Shape out_shape(const Shape& in, const std::vector<Value>&) const override {
    const auto rank = static_cast<std::int64_t>(in.size());
    // axis may equal the rank (everything in the first dimension): [-rank, rank].
    if (axis_ < -rank || axis_ > rank) {
      node_.invalid("axis " + std::to_string(axis_) + " is out of range for rank " + std::to_string(rank));
    }
    const auto axis = static_cast<std::size_t>(axis_ < 0 ? axis_ + rank : axis_);
    return {product(in, 0, axis), product(in, axis, in.size())};
  }

  std::int64_t axis_;
};

class Squeeze final : public ViewOp {
 public:
  explicit Squeeze(const NodeSpec& node) : ViewOp(node) { check_moved_argument(node, "axes", 1, 13); }

 private:
  Shape out_shape(const Shape& in, const std::vector<Value>& inputs) const override {
    const std::optional<Indices> axes = moved_argument(node_, inputs, "axes", 1, 13);
    // Given but empty, ONNX Runtime squeezes every 1 and ONNX's reference nothing.
    if (axes && axes->empty()) node_.unsupported("an empty 'axes' (its meaning is disputed)");
    std::vector<bool> drop(in.size(), false);
    if (!axes) {  // no axes: every dimension of 1
      for (std::size_t k = 0; k < in.size(); ++k) drop[k] = in[k] == 1;
    }
    for (std::int64_t k :
         normalize_axes(node_, axes.value_or(Indices{}), static_cast<std::int64_t>(in.size()), "axes")) {
      if (in[static_cast<std::size_t>(k)] != 1) {
        node_.invalid("axis " + std::to_string(k) + " of " + shape_str(in) + " is not 1");
      }
      drop[static_cast<std::size_t>(k)] = true;
    }
    Shape out;
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (!drop[k]) out.push_back(in[k]);
    }
    return out;
  }
};

class Unsqueeze final : public ViewOp {
 public:
  explicit Unsqueeze(const NodeSpec& node) : ViewOp(node) { check_moved_argument(node, "axes", 1, 13); }

 private:
  Shape out_shape(const Shape& in, const std::vector<Value>& inputs) const override {
    const std::optional<Indices> axes = moved_argument(node_, inputs, "axes", 1, 13);
    if (!axes) node_.invalid("the axes are missing");
    // The axes index the output, whose rank counts the new dimensions.
    const auto rank = static_cast<std::int64_t>(in.size() + axes->size());
    std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
    for (std::int64_t k : normalize_axes(node_, *axes, rank, "axes")) inserted[static_cast<std::size_t>(k)] = true;
    Shape out;
    std::size_t next = 0;
    for (bool one : inserted) out.push_back(one ? 1 : in[next++]);
    return out;
  }
};

// ---- Index maps: Transpose, Expand, Tile, Slice, Gather, GatherElements ------------------

class IndexMapOp : public ShapeFamilyOp {
 public:
  using ShapeFamilyOp::ShapeFamilyOp;
  std::vector<Value> forward(const std::vector<Value>& inputs) final {
    const Value& x = input(node_, inputs, 0);
    remember(inputs);
    // Backward rebuilds the map from the small arguments (shapes, axes, indices) rather
    // than keeping 8 bytes per output element alive between forward and backward.
    arguments_ = inputs;
    arguments_[0] = Value();
    Indices source;
    const Shape out = map(x.shape(), inputs, source);
    return {typed(gather_flat(x.tensor, source, out), x.type)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) final {
    if (!floating_input(0)) return first_only(Tensor());
    Indices source;
    const Shape out = map(shapes_.at(0), arguments_, source);
    return first_only(scatter_add_flat(grad_or_zeros(grad_outputs, 0, out), source, shapes_.at(0)));
  }

 protected:
  // The output's shape, and in `source` the input offset each output element reads; reads
  // no element of inputs[0] (only its shape, `in`).
  virtual Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const = 0;

 private:
  std::vector<Value> arguments_;  // the inputs but the data
};

class Transpose final : public IndexMapOp {
 public:
  explicit Transpose(const NodeSpec& node) : IndexMapOp(node), perm_(node.get_ints("perm")) {}

 private:
  Shape map(const Shape& in, const std::vector<Value>&, Indices& source) const override {
    const auto rank = static_cast<std::int64_t>(in.size());
    Indices perm = perm_;
    if (perm.empty()) {  // the default reverses the dimensions
      for (std::int64_t k = rank; k-- > 0;) perm.push_back(k);
    }
    if (static_cast<std::int64_t>(perm.size()) != rank) {
      node_.invalid("perm " + shape_str(perm_) + " does not match an input of rank " + std::to_string(rank));
    }
    perm = normalize_axes(node_, perm, rank, "perm");
    const Shape in_strides = contiguous_strides(in);
    Shape out(in.size());
    Indices strides(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) {
      out[k] = in[static_cast<std::size_t>(perm[k])];
      strides[k] = in_strides[static_cast<std::size_t>(perm[k])];
    }
    source = strided_source(out, strides, 0);
    return out;
  }

  Indices perm_;
};

class Expand final : public IndexMapOp {
 public:
  using IndexMapOp::IndexMapOp;

 private:
  Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const override {
    // ONNX's Expand broadcasts both ways: a 1 in the shape keeps the input's dimension.
    const Indices shape = int_input(node_, inputs, 1, "the shape");
    for (std::int64_t d : shape) {
      if (d < 0) node_.invalid("the shape " + shape_str(shape) + " has a negative dimension");
    }
    const Shape out = broadcast_shapes(in, shape, node_.where());
    source = broadcast_source_index(in, out);
    return out;
  }
};

class Tile final : public IndexMapOp {
 public:
  explicit Tile(const NodeSpec& node) : IndexMapOp(node) {
    if (node.opset < 6) node.unsupported("Tile before opset 6 (tiles and axis inputs)");
  }

 private:
  Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const override {
    const Indices repeats = int_input(node_, inputs, 1, "the repeats");
    if (repeats.size() != in.size()) {
      node_.invalid("repeats " + shape_str(repeats) + " do not match an input of rank " + std::to_string(in.size()));
    }
    // Tiling is broadcasting [1, d0, 1, d1, ...] to [r0, d0, r1, d1, ...], whose row-major
    // order is the output's [r0 * d0, r1 * d1, ...].
    Shape spread;
    Shape tiled;
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (repeats[k] < 0) node_.invalid("repeats " + shape_str(repeats) + " has a negative count");
      spread.insert(spread.end(), {1, in[k]});
      tiled.insert(tiled.end(), {repeats[k], in[k]});
    }
    count_of(node_, tiled, "tiling by the repeats");  // refused when it overflows, so no product below does
    Shape out;
    for (std::size_t k = 0; k < in.size(); ++k) out.push_back(repeats[k] * in[k]);
    source = broadcast_source_index(spread, tiled);
    return out;
  }
};

class Slice final : public IndexMapOp {
 public:
  explicit Slice(const NodeSpec& node) : IndexMapOp(node) {
    // Before opset 10 starts, ends and axes are attributes (and there are no steps).
    if (node.opset < 10) {
      node.require_ints("starts");
      node.require_ints("ends");
    }
  }

 private:
  Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const override {
    const auto rank = static_cast<std::int64_t>(in.size());
    const bool attributes = node_.opset < 10;
    const Indices starts = attributes ? node_.get_ints("starts") : int_input(node_, inputs, 1, "starts");
    const Indices ends = attributes ? node_.get_ints("ends") : int_input(node_, inputs, 2, "ends");
    Indices axes;
    if (attributes ? node_.has("axes") : has_input(inputs, 3)) {
      axes = attributes ? node_.get_ints("axes") : int_input(node_, inputs, 3, "axes");
    } else {
      for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
    }
    const Indices steps =
        !attributes && has_input(inputs, 4) ? int_input(node_, inputs, 4, "steps") : Indices(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      node_.invalid("starts, ends, axes and steps differ in length");
    }
    axes = normalize_axes(node_, axes, rank, "axes");

    const Shape in_strides = contiguous_strides(in);
    Shape out = in;
    Indices strides = in_strides;
    std::int64_t base = 0;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto k = static_cast<std::size_t>(axes[i]);
      std::int64_t first = 0;
      out[k] = slice_count(in[k], starts[i], ends[i], steps[i], first);
      base += first * in_strides[k];
      // A dimension of one element never steps (and a huge step times the stride could overflow).
      strides[k] = out[k] > 1 ? in_strides[k] * steps[i] : 0;
    }
    source = strided_source(out, strides, base);
    return out;
  }

  // How many elements start:end:step takes from a dimension of `dim`, and in `first` the
  // index of the first; ends beyond the dimension (INT64_MAX, INT64_MIN) are clamped.
  std::int64_t slice_count(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step,
                           std::int64_t& first) const {
    if (step == 0) node_.invalid("a step is 0");
    if (dim == 0) return 0;
    if (start < 0) start += dim;  // no overflow: start < 0 and dim > 0
    if (end < 0) end += dim;
    if (step > 0) {
      start = std::clamp<std::int64_t>(start, 0, dim);
      end = std::clamp<std::int64_t>(end, 0, dim);
      first = start;
      return end > start ? 1 + (end - start - 1) / step : 0;
    }
    // A negative step walks down from start (at most the last index) to end (at least -1,
    // before the first index). From a start before the first index to an end before it too,
    // ONNX's text clamps start to 0 and takes one element, its numpy reference none.
    if (start < 0 && end < 0) {
      node_.unsupported("a negative step from before the first index (start " + std::to_string(start - dim) +
                        " of a dimension of " + std::to_string(dim) + "; ONNX's text and reference differ)");
    }
    start = std::clamp<std::int64_t>(start, 0, dim - 1);
    end = std::clamp<std::int64_t>(end, -1, dim - 1);
    first = start;
    return start > end ? 1 - (start - end - 1) / step : 0;  // -(p / step) avoids negating INT64_MIN
  }
};

// Indices into a dimension of `dim`, negatives counted from the end.
std::int64_t checked_index(const NodeSpec& node, std::int64_t index, std::int64_t dim) {
  if (index < -dim || index >= dim) {
    node.invalid("index " + std::to_string(index) + " is out of range for a dimension of " + std::to_string(dim));
  }
  return index < 0 ? index + dim : index;
}

class Gather final : public IndexMapOp {
 public:
  explicit Gather(const NodeSpec& node) : IndexMapOp(node), axis_(node.get_int("axis", 0)) {}

 private:
  Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const override {
    const Value& indices = input(node_, inputs, 1);
    const Indices index = indices.to_ints(node_.where() + ": the indices");
    const std::size_t axis = axis_of(node_, axis_, in);
    // out = in[:axis] + indices' shape + in[axis + 1:], read block by block.
    Shape out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(axis));
    out.insert(out.end(), indices.shape().begin(), indices.shape().end());
    out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(axis) + 1, in.end());
    const std::int64_t outer = product(in, 0, axis);
    const std::int64_t dim = in[axis];
    const std::int64_t inner = product(in, axis + 1, in.size());
    source.reserve(static_cast<std::size_t>(shape_numel(out)));
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t j : index) {
        const std::int64_t start = (o * dim + checked_index(node_, j, dim)) * inner;
        for (std::int64_t i = 0; i < inner; ++i) source.push_back(start + i);
      }
    }
    return out;
  }

  std::int64_t axis_;
};

class GatherElements final : public IndexMapOp {
 public:
  explicit GatherElements(const NodeSpec& node) : IndexMapOp(node), axis_(node.get_int("axis", 0)) {}

 private:
  Shape map(const Shape& in, const std::vector<Value>& inputs, Indices& source) const override {
    const Value& indices = input(node_, inputs, 1);
    const Indices index = indices.to_ints(node_.where() + ": the indices");
    const Shape& out = indices.shape();
    const std::size_t axis = axis_of(node_, axis_, in);
    if (out.size() != in.size()) {
      node_.invalid("indices " + shape_str(out) + " and data " + shape_str(in) + " differ in rank");
    }
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (k != axis && out[k] > in[k]) node_.invalid("indices " + shape_str(out) + " exceed data " + shape_str(in));
    }
    // Each output element reads its own coordinates in the data, but along `axis` the index.
    const Shape in_strides = contiguous_strides(in);
    Indices strides = in_strides;
    strides[axis] = 0;
    source = strided_source(out, strides, 0);
    for (std::size_t e = 0; e < source.size(); ++e) {
      source[e] += checked_index(node_, index[e], in[axis]) * in_strides[axis];
    }
    return out;
  }

  std::int64_t axis_;
};

// ---- Blocks along an axis: Concat, Split -------------------------------------------------

// `parts` (same rank and element type, equal outside `axis`) joined along `axis`.
Tensor concat_along(const std::vector<Tensor>& parts, std::size_t axis) {
  Shape out = parts.at(0).shape();
  out[axis] = 0;
  for (const Tensor& p : parts) out[axis] += p.shape()[axis];
  Tensor result = Tensor::empty(out, parts[0].dtype());
  std::int64_t offset = 0;
  for (const Tensor& p : parts) {
    const std::int64_t length = p.shape()[axis];
    result.narrow(static_cast<int>(axis), offset, length).copy_from(p);
    offset += length;
  }
  return result;
}

// `whole` cut along `axis` into pieces of `lengths` (contiguous copies).
std::vector<Tensor> split_along(const Tensor& whole, std::size_t axis, const Indices& lengths) {
  std::vector<Tensor> pieces;
  std::int64_t offset = 0;
  for (std::int64_t length : lengths) {
    pieces.push_back(whole.narrow(static_cast<int>(axis), offset, length).clone());
    offset += length;
  }
  return pieces;
}

class Concat final : public ShapeFamilyOp {
 public:
  explicit Concat(const NodeSpec& node) : ShapeFamilyOp(node), axis_(node.require_int("axis")) {}
  bool differentiable_input(std::size_t) const override { return true; }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    if (inputs.empty()) node_.invalid("there are no inputs");
    const Value& x = input(node_, inputs, 0);
    axis_index_ = axis_of(node_, axis_, x.shape());
    std::vector<Tensor> parts;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Value& v = input(node_, inputs, i);
      Shape a = v.shape();
      Shape b = x.shape();
      if (a.size() == b.size()) a[axis_index_] = b[axis_index_] = 0;
      if (v.type != x.type || a != b) {
        node_.invalid("input " + std::to_string(i) + " " + v.str() + " does not join " + x.str() + " along axis " +
                      std::to_string(axis_index_));
      }
      parts.push_back(v.tensor);
    }
    remember(inputs);
    return {typed(concat_along(parts, axis_index_), x.type)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (!floating_input(0)) return std::vector<Tensor>(types_.size());
    Shape out = shapes_.at(0);
    Indices lengths;
    out[axis_index_] = 0;
    for (const Shape& s : shapes_) {
      lengths.push_back(s[axis_index_]);
      out[axis_index_] += s[axis_index_];
    }
    return split_along(grad_or_zeros(grad_outputs, 0, out), axis_index_, lengths);
  }

 private:
  std::int64_t axis_;
  std::size_t axis_index_ = 0;
};

class Split final : public ShapeFamilyOp {
 public:
  explicit Split(const NodeSpec& node) : ShapeFamilyOp(node), axis_(node.get_int("axis", 0)) {
    check_moved_argument(node, "split", 1, 13);
    if (node.has("num_outputs")) {
      if (node.opset < 18) node.unsupported("the attribute 'num_outputs' before opset 18");
      if (node.get_int("num_outputs", 0) < 1 ||
          node.get_int("num_outputs", 0) != static_cast<std::int64_t>(node.outputs.size())) {
        node.invalid("num_outputs is " + std::to_string(node.get_int("num_outputs", 0)) + " for " +
                     std::to_string(node.outputs.size()) + " outputs");
      }
    }
  }

  std::vector<Value> forward(const std::vector<Value>& inputs) override {
    const Value& x = input(node_, inputs, 0);
    remember(inputs);
    axis_index_ = axis_of(node_, axis_, x.shape());
    lengths_ = lengths(x.shape()[axis_index_], inputs);
    std::vector<Value> outputs;
    for (Tensor& piece : split_along(x.tensor, axis_index_, lengths_)) {
      outputs.push_back(typed(std::move(piece), x.type));
    }
    return outputs;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (!floating_input(0)) return first_only(Tensor());
    std::vector<Tensor> parts;
    for (std::size_t k = 0; k < lengths_.size(); ++k) {
      Shape piece = shapes_.at(0);
      piece[axis_index_] = lengths_[k];
      parts.push_back(grad_or_zeros(grad_outputs, k, piece));
    }
    return first_only(concat_along(parts, axis_index_));
  }

 private:
  // The pieces' lengths: given (split), or num_outputs chunks of ceil(dim / n) with a
  // smaller last one (opset 18), or equal pieces, one per output.
  Indices lengths(std::int64_t dim, const std::vector<Value>& inputs) const {
    const auto n = static_cast<std::int64_t>(node_.outputs.size());
    Indices result;
    if (std::optional<Indices> given = moved_argument(node_, inputs, "split", 1, 13)) {
      result = *given;
    } else if (node_.has("num_outputs")) {
      const std::int64_t chunk = (dim + n - 1) / n;
      if (chunk * (n - 1) > dim) {
        node_.invalid("cannot cut " + std::to_string(dim) + " into " + std::to_string(n) + " chunks");
      }
      result.assign(static_cast<std::size_t>(n - 1), chunk);
      result.push_back(dim - chunk * (n - 1));
    } else {
      if (n == 0 || dim % n != 0) {
        node_.invalid("cannot split " + std::to_string(dim) + " into " + std::to_string(n) + " equal pieces");
      }
      result.assign(static_cast<std::size_t>(n), dim / n);
    }
    std::int64_t total = 0;
    for (std::int64_t length : result) {
      if (length < 0) node_.invalid("split " + shape_str(result) + " has a negative length");
      total += length;
    }
    if (static_cast<std::int64_t>(result.size()) != n || total != dim) {
      node_.invalid("split " + shape_str(result) + " does not cut a dimension of " + std::to_string(dim) + " into " +
                    std::to_string(n) + " outputs");
    }
    return result;
  }

  std::int64_t axis_;
  std::size_t axis_index_ = 0;
  Indices lengths_;
};

template <class T>
void add(OpRegistry& registry, const std::string& op_type) {
  registry.add(op_type, [](const NodeSpec& node) { return std::make_unique<T>(node); });
}

}  // namespace

void register_shape_ops(OpRegistry& registry) {
  add<Reshape>(registry, "Reshape");
  add<Flatten>(registry, "Flatten");
  add<Squeeze>(registry, "Squeeze");
  add<Unsqueeze>(registry, "Unsqueeze");
  add<Transpose>(registry, "Transpose");
  add<Expand>(registry, "Expand");
  add<Tile>(registry, "Tile");
  add<Slice>(registry, "Slice");
  add<Gather>(registry, "Gather");
  add<GatherElements>(registry, "GatherElements");
  add<Concat>(registry, "Concat");
  add<Split>(registry, "Split");
}

}  // namespace tessera::onnx
