// Which op runs each node of a split graph, and how (domain_placement.hpp).
#include "onnx/domain_placement.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "onnx/domain_ops.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx {

std::string Layout::str() const {
  std::ostringstream out;
  switch (kind) {
    case Kind::whole: return "whole";
    case Kind::per_rank: return "per rank";
    case Kind::split: out << "split"; break;
    case Kind::padded: out << "padded"; break;
    case Kind::edge_slice: out << "edge slice"; break;
    case Kind::flat: out << "flat (axis " << flat_axis << ")"; break;
  }
  out << " (lat axis " << lat_axis << ", lon axis " << lon_axis << ")";
  if (grid) out << " of " << grid->global_lat() << " x " << grid->global_lon();
  return out.str();
}

namespace {

using Builder = std::function<std::unique_ptr<Op>()>;
using Grid = std::shared_ptr<const domain::Decomposition>;

[[noreturn]] void refuse(const NodeSpec& node, const std::string& why) {
  throw UnsupportedError(node.where() + " cannot run domain-parallel: " + why);
}

int normalized_axis(const NodeSpec& node, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank) node.invalid("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

const std::set<std::string>& pointwise_ops() {
  static const std::set<std::string> ops = {
      "Sqrt", "Reciprocal", "Erf", "Exp", "Log", "Sigmoid", "Tanh", "Softplus", "Softsign", "LeakyRelu", "Elu",
      "Selu", "HardSigmoid", "HardSwish", "Gelu", "Celu", "ThresholdedRelu", "Shrink", "Mish", "Floor", "Ceil",
      "Round", "Neg", "Abs", "Sign", "Relu", "Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Equal", "Less",
      "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Sum", "Mean", "Max", "Min", "Not", "Where",
      "Clip", "Cast", "CastLike", "Identity", "Dropout"};
  return ops;
}

// The ints of an attribute, or of input `index` when the opset moved it there.
std::vector<std::int64_t> ints_from(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index,
                                    const std::string& attribute) {
  if (index < inputs.size() && inputs[index].defined()) return inputs[index].to_ints(node.where() + ": " + attribute);
  return node.get_ints(attribute);
}

// Every split-family input; the first one's layout.
const Layout* first_split(const std::vector<Layout>& layouts) {
  for (const Layout& l : layouts) {
    if (l.is_split_family()) return &l;
  }
  return nullptr;
}

bool same_grid(const Grid& a, const Grid& b) {
  return a == b || (a && b && a->global_lat() == b->global_lat() && a->global_lon() == b->global_lon());
}

bool same_split(const Layout& a, const Layout& b) {
  return a.kind == b.kind && a.lat_axis == b.lat_axis && a.lon_axis == b.lon_axis && a.flat_axis == b.flat_axis &&
         same_grid(a.grid, b.grid);
}

std::unique_ptr<Op> rebuilt(const OpRegistry& registry, NodeSpec node) { return registry.create(node); }

LocalOp::LayoutRule fixed(std::vector<Layout> layouts) {
  return [layouts](const std::vector<Value>&, const std::vector<Value>&) { return layouts; };
}

class Placer {
 public:
  Placer(DomainPlacement& placement, const NodeSpec& node, std::unique_ptr<Op>& op, const std::vector<Value>& inputs,
         const std::vector<Layout>& layouts)
      : p_(placement), node_(node), op_(op), in_(inputs), layouts_(layouts) {}

  Builder decide() {
    const std::string& type = node_.op_type;
    check_padding_readers();
    if (type == "Shape" || type == "Size") return keep();
    if (pointwise_ops().count(type) != 0) return pointwise();
    if (type == "BatchNormalization") return batch_norm();
    if (type == "Conv" || type == "MaxPool" || type == "AveragePool") return halo_window();
    if (type == "ConvTranspose") return conv_transpose();
    if (type == "Resize" || type == "Upsample") return resize();
    if (type == "Concat") return concat();
    if (type == "Split") return split_op();
    if (type == "Slice") return slice();
    if (type == "Pad") return pad();
    if (type == "Transpose") return transpose();
    if (type == "Reshape" || type == "Flatten") return reshape();
    if (type == "Squeeze" || type == "Unsqueeze") return squeeze();
    if (type == "GlobalAveragePool") return global_average();
    if (type.rfind("Reduce", 0) == 0) return reduce();
    if (type == "InstanceNormalization") return instance_norm();
    if (type == "LayerNormalization") return layer_norm();
    if (type == "Softmax" || type == "LogSoftmax") return softmax();
    if (type == "MatMul") return matmul();
    if (type == "Gemm") return gemm();
    if (type == "Gather") return gather();
    refuse(node_, "tessera has no split form of " + type + " (it reads " + x().str() + ")");
  }

 private:
  const Layout& x() const { return layouts_[0]; }
  std::int64_t rank_of(std::size_t i) const { return static_cast<std::int64_t>(in_[i].shape().size()); }

  // Padding still to come and the slices of a wrap are read only by the ops that take
  // them over as a halo.
  void check_padding_readers() const {
    static const std::set<std::string> readers = {"Conv", "MaxPool", "AveragePool", "Pad", "Concat"};
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      const Layout& l = layouts_[i];
      if ((l.kind == Layout::Kind::padded || l.kind == Layout::Kind::edge_slice) && readers.count(node_.op_type) == 0) {
        refuse(node_, "input '" + node_.inputs[i] + "' is the padding or wrap of a split field (" + l.str() +
                          "), which only Conv, MaxPool and AveragePool read split; pad right before them");
      }
      if (l.kind == Layout::Kind::flat && node_.op_type != "Reshape" && node_.op_type != "InstanceNormalization" &&
          pointwise_ops().count(node_.op_type) == 0 && node_.op_type != "ReduceSum") {
        refuse(node_, "input '" + node_.inputs[i] + "' merges the split axes into one (" + l.str() +
                          "); only elementwise ops, InstanceNormalization, ReduceSum and a Reshape back read it split");
      }
    }
  }

  Builder keep() {
    return [this] { return std::move(op_); };
  }
  Builder local(std::vector<Layout> outputs) {
    return [this, outputs] { return std::make_unique<LocalOp>(std::move(op_), layouts_, p_.comm(), fixed(outputs)); };
  }
  std::vector<Layout> same_for_outputs(const Layout& l) const { return std::vector<Layout>(node_.outputs.size(), l); }
  void require_whole(std::size_t from) const {
    for (std::size_t i = from; i < layouts_.size(); ++i) {
      if (i < in_.size() && in_[i].defined() && !layouts_[i].is_whole()) {
        refuse(node_, "input '" + node_.inputs[i] + "' is " + layouts_[i].str() + "; tessera splits only input 0 of " +
                          node_.op_type);
      }
    }
  }
  const Layout& require_split_x() const {
    if (x().kind != Layout::Kind::split) refuse(node_, "input '" + node_.inputs[0] + "' is " + x().str());
    return x();
  }

  Builder pointwise() {
    std::int64_t out_rank = 0;
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (in_[i].defined()) out_rank = std::max(out_rank, rank_of(i));
    }
    std::optional<Layout> common;
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (!in_[i].defined() || !layouts_[i].is_split_family()) continue;
      const std::int64_t shift = out_rank - rank_of(i);
      Layout aligned = layouts_[i].moved([shift](int a) { return static_cast<int>(a + shift); });
      if (aligned.kind == Layout::Kind::flat) aligned.flat_axis += static_cast<int>(shift);
      if (common && !same_split(*common, aligned)) {
        refuse(node_, "its inputs are split differently (" + common->str() + " and " + aligned.str() + ")");
      }
      common = aligned;
    }
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (!in_[i].defined() || layouts_[i].is_split_family()) continue;
      if (layouts_[i].kind == Layout::Kind::per_rank) {
        refuse(node_, "input '" + node_.inputs[i] + "' differs between ranks (it was read off a split value)");
      }
      const std::int64_t shift = out_rank - rank_of(i);
      for (int axis : {common->lat_axis, common->lon_axis, common->kind == Layout::Kind::flat ? common->flat_axis : -1}) {
        const std::int64_t own = axis - shift;
        if (axis >= 0 && own >= 0 && in_[i].shape()[own] != 1) {
          refuse(node_, "input '" + node_.inputs[i] + "' is a whole tensor " + in_[i].str() +
                            " of extent " + std::to_string(in_[i].shape()[own]) + " along split axis " +
                            std::to_string(axis) + "; it would have to be split like the field");
        }
      }
    }
    return local(same_for_outputs(*common));
  }

  Builder batch_norm() {
    const Layout& l = require_split_x();
    if (l.splits(1)) refuse(node_, "its channel axis 1 is split");
    require_whole(1);
    return local(same_for_outputs(l));
  }

  // Conv and pools: the halo the window reads beyond the block.
  Builder halo_window() {
    const Layout& l = x();
    if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::padded) refuse(node_, "input 'X' is " + l.str());
    if (rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) {
      refuse(node_, "a split " + node_.op_type + " runs on [N, C, lat, lon] split along its last two axes; X is " + l.str());
    }
    require_whole(1);
    const bool conv = node_.op_type == "Conv", max_pool = node_.op_type == "MaxPool";
    if (node_.outputs.size() > 1 && !node_.outputs[1].empty()) refuse(node_, "its Indices output is not split");
    if (node_.get_int("ceil_mode", 0) != 0) refuse(node_, "ceil_mode 1");
    const std::string auto_pad = node_.get_string("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") refuse(node_, "auto_pad " + auto_pad + " (give explicit pads)");
    Shape kernel = conv ? Shape(in_[1].shape().begin() + 2, in_[1].shape().end()) : node_.require_ints("kernel_shape");
    if (kernel.size() != 2) refuse(node_, "a " + std::to_string(kernel.size()) + "-d window");
    const Shape pads = auto_pad == "VALID" ? Shape(4, 0) : node_.get_ints("pads", Shape(4, 0));
    const Shape strides = node_.get_ints("strides", Shape(2, 1)), dilations = node_.get_ints("dilations", Shape(2, 1));
    if (node_.op_type == "AveragePool" && node_.get_int("count_include_pad", 0) == 0 &&
        std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p != 0; })) {
      refuse(node_, "pads with count_include_pad 0 (each rank would count its halo)");
    }
    const EdgeFill own_fill = max_pool ? EdgeFill::lowest : EdgeFill::zero;
    std::array<EdgePadding, 4> edges{};
    for (int a = 0; a < 2; ++a) {
      const std::int64_t k = kernel[a], s = strides[a], d = dilations[a], reach = d * (k - 1);
      const EdgePadding lazy_b = l.pads[2 * a], lazy_a = l.pads[2 * a + 1];
      if ((lazy_b.width > 0 && pads[a] > 0) || (lazy_a.width > 0 && pads[a + 2] > 0)) {
        refuse(node_, "it pads an edge the graph already padded (a Pad or wrap before it, and pads " +
                          shape_str(pads) + ")");
      }
      const std::int64_t before = lazy_b.width + pads[a], after_total = lazy_a.width + pads[a + 2];
      const std::int64_t global = a == 0 ? l.grid->global_lat() : l.grid->global_lon();
      const std::int64_t out = (global + before + after_total - reach - 1) / s + 1;
      if (global % s != 0 || out != global / s) {
        refuse(node_, "along " + std::string(a == 0 ? "latitude" : "longitude") + " its output (" + std::to_string(out) +
                          ") is not the field's " + std::to_string(global) + " / stride " + std::to_string(s) +
                          " on the same blocks (the split keeps the grid: 'same' padding)");
      }
      const std::int64_t after = std::max<std::int64_t>(0, reach - before - s + 1);
      if (lazy_a.width > 0 && after > lazy_a.width) refuse(node_, "its window reaches past the graph's padding");
      edges[2 * a] = {before, lazy_b.width > 0 ? lazy_b.fill : own_fill};
      edges[2 * a + 1] = {after, lazy_a.width > 0 ? lazy_a.fill : own_fill};
      if (lazy_b.fill == EdgeFill::periodic && lazy_b.width > 0) edges[2 * a + 1].fill = EdgeFill::periodic;
      if (lazy_a.fill == EdgeFill::periodic && lazy_a.width > 0) edges[2 * a].fill = EdgeFill::periodic;
    }
    if (!DomainPlacement::blocks_divide(*l.grid, strides[0], strides[1])) {
      refuse(node_, "stride " + shape_str(strides) + " does not divide every rank's block of " + l.str());
    }
    NodeSpec inner = node_;
    inner.attributes.erase("auto_pad");
    inner.attributes["pads"].kind = Attribute::Kind::integers;
    inner.attributes["pads"].ints = Shape(4, 0);
    return [this, inner, edges, strides, l] {
      const Grid out_grid = strides[0] == 1 && strides[1] == 1 ? l.grid : p_.scaled_grid(l.grid, 1, strides[0], 1, strides[1]);
      const bool any = std::any_of(edges.begin(), edges.end(), [](const EdgePadding& e) { return e.width > 0; });
      auto halo = any ? std::make_unique<SplitHalo>(*l.grid, edges, node_.where()) : nullptr;
      return std::make_unique<HaloOp>(rebuilt(p_.registry(), inner), layouts_, p_.comm(), std::move(halo),
                                      Layout::split(2, 3, out_grid), HaloCrop{}, nullptr);
    };
  }

  Builder conv_transpose() {
    const Layout& l = require_split_x();
    if (rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) refuse(node_, "X is " + l.str());
    require_whole(1);
    const Shape kernel(in_[1].shape().begin() + 2, in_[1].shape().end());
    const Shape strides = node_.get_ints("strides", Shape(2, 1));
    const Shape pads = node_.get_ints("pads", Shape(4, 0)), dilations = node_.get_ints("dilations", Shape(2, 1));
    const Shape out_pad = node_.get_ints("output_padding", Shape(2, 0));
    const bool tiles = kernel == strides && std::all_of(pads.begin(), pads.end(), [](std::int64_t p) { return p == 0; }) &&
                       dilations == Shape{1, 1} && out_pad == Shape{0, 0} && !node_.has("output_shape") &&
                       node_.get_string("auto_pad", "NOTSET") == "NOTSET";
    if (!tiles) refuse(node_, "only a ConvTranspose whose kernel equals its stride (no overlap, no pads) runs split");
    return [this, strides, l] {
      Layout out = Layout::split(2, 3, p_.scaled_grid(l.grid, strides[0], 1, strides[1], 1));
      return std::make_unique<LocalOp>(std::move(op_), layouts_, p_.comm(), fixed({out}));
    };
  }

  Builder resize() {
    const Layout& l = require_split_x();
    if (rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) refuse(node_, "X is " + l.str());
    const bool upsample = node_.op_type == "Upsample";
    const std::string mode = node_.get_string("mode", "nearest");
    const std::string transform = upsample ? "asymmetric" : node_.get_string("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = upsample ? "floor" : node_.get_string("nearest_mode", "round_prefer_floor");
    // The factor along each split axis, from the scales or the sizes.
    std::vector<double> scales;
    Shape sizes;
    const std::size_t scales_at = upsample || node_.opset < 11 ? 1 : 2;
    if (upsample && node_.has("scales")) {
      scales = node_.get_floats("scales");
    } else if (scales_at < in_.size() && in_[scales_at].defined() && in_[scales_at].numel() > 0) {
      const Tensor s = in_[scales_at].tensor;
      if (s.dtype() == DType::f32) {
        for (float v : s.to_vector<float>()) scales.push_back(v);
      } else {
        scales = s.to_vector<double>();
      }
    } else if (in_.size() > 3 && in_[3].defined()) {
      sizes = in_[3].to_ints(node_.where() + ": sizes");
    }
    if (node_.has("axes") || (scales.size() != 4 && sizes.size() != 4)) refuse(node_, "scales or sizes for some axes only");
    std::int64_t factor[2];
    for (int a = 0; a < 2; ++a) {
      const std::int64_t global = a == 0 ? l.grid->global_lat() : l.grid->global_lon();
      const double f = sizes.empty() ? scales[2 + a] : static_cast<double>(sizes[2 + a]) / static_cast<double>(global);
      factor[a] = static_cast<std::int64_t>(f);
      if (f < 1.0 || static_cast<double>(factor[a]) != f) {
        refuse(node_, "only an integer upsampling factor keeps the blocks (factor " + std::to_string(f) + ")");
      }
    }
    const bool half_pixel = transform == "half_pixel" || transform == "pytorch_half_pixel";
    if (!half_pixel && transform != "asymmetric") refuse(node_, "coordinate_transformation_mode " + transform);
    HaloCrop crop;
    std::array<EdgePadding, 4> edges{};
    if (mode == "nearest") {
      // Output i reads input i / f (rounded as nearest_mode says) in block terms only if
      // the first f outputs all read input 0.
      for (int a = 0; a < 2; ++a) {
        for (std::int64_t i = 0; i < factor[a]; ++i) {
          const double xin = half_pixel ? (i + 0.5) / factor[a] - 0.5 : static_cast<double>(i) / factor[a];
          double index = 0;
          if (nearest == "floor") index = std::floor(xin);
          else if (nearest == "ceil") index = std::ceil(xin);
          else if (nearest == "round_prefer_ceil") index = std::floor(xin + 0.5);
          else index = std::ceil(xin - 0.5);
          if (index > 0.0) refuse(node_, "nearest_mode " + nearest + " with " + transform + " reads across blocks");
        }
      }
    } else if (mode == "linear") {
      edges = {EdgePadding{1, EdgeFill::replicate}, EdgePadding{1, EdgeFill::replicate},
               EdgePadding{1, EdgeFill::replicate}, EdgePadding{1, EdgeFill::replicate}};
      crop = {factor[0], factor[1]};
    } else {
      refuse(node_, "mode " + mode);
    }
    const std::int64_t f_lat = factor[0], f_lon = factor[1];
    const bool rewrite_sizes = !sizes.empty();
    return [this, edges, crop, l, f_lat, f_lon, rewrite_sizes] {
      const Grid out_grid = p_.scaled_grid(l.grid, f_lat, 1, f_lon, 1);
      auto halo = crop.lat != 0 ? std::make_unique<SplitHalo>(*l.grid, edges, node_.where()) : nullptr;
      HaloOp::InputRewrite rewrite;
      if (rewrite_sizes) {
        rewrite = [f_lat, f_lon](std::vector<Value>& inputs, const Tensor& haloed) {
          std::vector<std::int64_t> sizes = inputs[3].to_ints("sizes");
          sizes[2] = haloed.size(2) * f_lat;
          sizes[3] = haloed.size(3) * f_lon;
          inputs[3] = Value::integers(sizes, {4});
        };
      }
      return std::make_unique<HaloOp>(std::move(op_), layouts_, p_.comm(), std::move(halo), Layout::split(2, 3, out_grid),
                                      crop, rewrite);
    };
  }

  Builder concat() {
    const int axis = normalized_axis(node_, node_.require_int("axis"), rank_of(0));
    const Layout* s = first_split(layouts_);
    if (s->splits(axis) || s->slice_axis == axis) return wrap(axis);
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      if (!same_split(layouts_[i], x())) {
        refuse(node_, "input '" + node_.inputs[i] + "' is " + layouts_[i].str() + " and input '" + node_.inputs[0] +
                          "' " + x().str() + "; a split Concat joins fields split alike");
      }
    }
    if (x().kind != Layout::Kind::split) refuse(node_, "input '" + node_.inputs[0] + "' is " + x().str());
    return local({x()});
  }

  // Concat([Slice(v, last w), v, Slice(v, first w)], axis): v padded periodically.
  Builder wrap(int axis) {
    std::size_t source = layouts_.size();
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      if (layouts_[i].kind == Layout::Kind::split || layouts_[i].kind == Layout::Kind::padded) {
        if (source != layouts_.size()) refuse(node_, "it joins two split values along split axis " + std::to_string(axis));
        source = i;
      }
    }
    const std::string not_wrap = "along split axis " + std::to_string(axis) +
                                 " only a periodic wrap [last columns, field, first columns] runs split";
    if (source == layouts_.size() || source > 1 || layouts_.size() - source > 2) refuse(node_, not_wrap);
    Layout out = layouts_[source];
    const int edge = axis == out.lat_axis ? 0 : 2;
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      if (i == source) continue;
      const Layout& e = layouts_[i];
      const bool before = i < source;
      if (e.kind != Layout::Kind::edge_slice || e.slice_source != node_.inputs[source] || e.slice_axis != axis ||
          e.slice_last != before) {
        refuse(node_, not_wrap);
      }
      EdgePadding& pad = out.pads[edge + (before ? 0 : 1)];
      if (pad.width != 0) refuse(node_, "it wraps an edge the graph already padded");
      pad = {e.slice_width, EdgeFill::periodic};
    }
    out.kind = Layout::Kind::padded;
    for (int e : {edge, edge + 1}) {
      if (out.pads[e].width == 0) out.pads[e].fill = EdgeFill::periodic;
    }
    return [this, source, out] { return std::make_unique<PassOp>(node_, layouts_, p_.comm(), source, out); };
  }

  Builder split_op() {
    const Layout& l = require_split_x();
    const int axis = normalized_axis(node_, node_.get_int("axis", 0), rank_of(0));
    if (l.splits(axis)) refuse(node_, "it splits along split axis " + std::to_string(axis));
    require_whole(1);
    return local(same_for_outputs(l));
  }

  Builder slice() {
    const Layout& l = require_split_x();
    require_whole(1);
    const bool attrs = node_.opset < 10;
    const std::vector<std::int64_t> starts = ints_from(node_, attrs ? std::vector<Value>{} : in_, 1, "starts");
    const std::vector<std::int64_t> ends = ints_from(node_, attrs ? std::vector<Value>{} : in_, 2, "ends");
    std::vector<std::int64_t> axes = ints_from(node_, attrs ? std::vector<Value>{} : in_, 3, "axes");
    const std::vector<std::int64_t> steps = attrs ? std::vector<std::int64_t>{} : ints_from(node_, in_, 4, "steps");
    if (axes.empty()) {
      axes.resize(starts.size());
      std::iota(axes.begin(), axes.end(), 0);
    }
    int split_axis = -1;
    std::size_t which = 0;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const int a = normalized_axis(node_, axes[k], rank_of(0));
      if (!l.splits(a)) continue;
      if (axes.size() != 1) refuse(node_, "it slices split axis " + std::to_string(a) + " together with other axes");
      split_axis = a;
      which = k;
    }
    if (split_axis < 0) return local({l});
    if (!steps.empty() && steps[which] != 1) refuse(node_, "a step along split axis " + std::to_string(split_axis));
    const std::int64_t global = split_axis == l.lat_axis ? l.grid->global_lat() : l.grid->global_lon();
    auto clamp = [global](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + global : v, 0, global); };
    const std::int64_t s = clamp(starts[which]), e = clamp(ends[which]);
    Layout out = l;
    out.kind = Layout::Kind::edge_slice;
    out.slice_axis = split_axis;
    out.slice_source = node_.inputs[0];
    if (s == 0 && e > 0 && e < global) {
      out.slice_last = false;
      out.slice_width = e;
    } else if (e == global && s > 0 && s < global) {
      out.slice_last = true;
      out.slice_width = global - s;
    } else {
      refuse(node_, "along split axis " + std::to_string(split_axis) + " it keeps [" + std::to_string(s) + ", " +
                        std::to_string(e) + ") of " + std::to_string(global) +
                        "; only the first or last columns of a periodic wrap run split");
    }
    return [this, out] { return std::make_unique<PassOp>(node_, layouts_, p_.comm(), 0, out); };
  }

  Builder pad() {
    const Layout& l = x();
    if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::padded) refuse(node_, "X is " + l.str());
    require_whole(1);
    const std::vector<std::int64_t> pads = node_.opset < 11 ? node_.get_ints("pads") : ints_from(node_, in_, 1, "pads");
    if (in_.size() > 3 && in_[3].defined()) refuse(node_, "the axes input");
    const std::int64_t rank = rank_of(0);
    if (static_cast<std::int64_t>(pads.size()) != 2 * rank) node_.invalid("pads needs 2 entries per axis");
    const std::string mode = node_.get_string("mode", "constant");
    EdgeFill fill = EdgeFill::zero;
    if (mode == "edge") fill = EdgeFill::replicate;
    else if (mode == "reflect") fill = EdgeFill::reflect;
    else if (mode == "wrap") fill = EdgeFill::periodic;
    else if (mode != "constant") refuse(node_, "mode " + mode);
    if (mode == "constant") {
      double value = node_.get_float("value", 0.0);
      if (node_.opset >= 11 && in_.size() > 2 && in_[2].defined()) {
        const Tensor v = in_[2].tensor;
        value = v.dtype() == DType::f32 ? v.to_vector<float>()[0] : v.dtype() == DType::f64 ? v.to_vector<double>()[0]
                                                                                             : static_cast<double>(v.to_vector<std::int64_t>()[0]);
      }
      if (value != 0.0) refuse(node_, "constant padding with " + std::to_string(value) + " (only 0 runs split)");
    }
    Layout out = l;
    out.kind = Layout::Kind::padded;
    for (std::int64_t a = 0; a < rank; ++a) {
      const std::int64_t before = pads[a], after = pads[a + rank];
      if (before < 0 || after < 0) refuse(node_, "negative pads (cropping) of a split axis");
      if (!l.splits(static_cast<int>(a))) {
        if (before != 0 || after != 0) refuse(node_, "it pads whole axis " + std::to_string(a) + " as well");
        continue;
      }
      const int edge = a == l.lat_axis ? 0 : 2;
      for (int side = 0; side < 2; ++side) {
        const std::int64_t width = side == 0 ? before : after;
        if (width == 0 && fill != EdgeFill::periodic) continue;
        if (out.pads[edge + side].width != 0) refuse(node_, "it pads an edge the graph already padded");
        out.pads[edge + side] = {width, fill};
      }
    }
    return [this, out] { return std::make_unique<PassOp>(node_, layouts_, p_.comm(), 0, out); };
  }

  Builder transpose() {
    const Layout& l = require_split_x();
    std::vector<std::int64_t> perm = node_.get_ints("perm");
    if (perm.empty()) {
      perm.resize(static_cast<std::size_t>(rank_of(0)));
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    auto where = [perm](int a) {
      return static_cast<int>(std::find(perm.begin(), perm.end(), a) - perm.begin());
    };
    return local({l.moved(where)});
  }

  // Reshape/Flatten: decided from the first forward's shapes (a Reshape's target comes
  // from values): the leading axes only; the split axes merged, with leading ones, into
  // the last axis (GroupNorm's [N, C, lat, lon] -> [N, G, C/G * lat * lon]: each row of
  // the result is whole blocks of this rank's field); or back to the shape it had.
  Builder reshape() {
    // The target shape may be read off this rank's block (Shape of it): that is what
    // makes the Reshape back after a GroupNorm local.
    if (layouts_.size() > 1 && layouts_[1].is_split_family()) refuse(node_, "its shape input is a split value");
    const Layout l = x();
    if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::flat) refuse(node_, "X is " + l.str());
    const NodeSpec node = node_;
    auto rule = [node, l](const std::vector<Value>& in, const std::vector<Value>& out) {
      const Shape& from = in[0].shape();
      const Shape& to = out[0].shape();
      if (l.kind == Layout::Kind::flat) {
        if (to == l.merged) return std::vector<Layout>{*l.restores};
        refuse(node, "it reshapes merged split axes " + shape_str(from) + " to " + shape_str(to) +
                         ", not back to " + shape_str(l.merged));
      }
      auto product = [](const Shape& s, std::size_t b, std::size_t e) {
        return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(b), s.begin() + static_cast<std::ptrdiff_t>(e),
                               std::int64_t{1}, std::multiplies<>());
      };
      const std::size_t first = static_cast<std::size_t>(l.lon_axis >= 0 ? std::min(l.lat_axis, l.lon_axis) : l.lat_axis);
      const Shape split_tail(from.begin() + static_cast<std::ptrdiff_t>(first), from.end());
      if (to.size() >= split_tail.size() && Shape(to.end() - static_cast<std::ptrdiff_t>(split_tail.size()), to.end()) == split_tail) {
        const int shift = static_cast<int>(to.size()) - static_cast<int>(from.size());
        return std::vector<Layout>{l.moved([shift](int a) { return a + shift; })};
      }
      const std::int64_t leading = product(to, 0, to.size() - 1);
      if (!to.empty() && leading != 0 && product(from, 0, first) % leading == 0 &&
          to.back() % product(from, first, from.size()) == 0) {
        Layout flat = l;
        flat.kind = Layout::Kind::flat;
        flat.flat_axis = static_cast<int>(to.size()) - 1;
        flat.merged = from;
        flat.restores = std::make_shared<const Layout>(l);
        return std::vector<Layout>{flat};
      }
      refuse(node, "it reshapes split axes " + std::to_string(l.lat_axis) + ", " + std::to_string(l.lon_axis) + " of " +
                       shape_str(from) + " to " + shape_str(to) + " (this rank's block)");
    };
    return [this, rule] { return std::make_unique<LocalOp>(std::move(op_), layouts_, p_.comm(), rule); };
  }

  Builder squeeze() {
    const Layout& l = require_split_x();
    require_whole(1);
    const bool unsqueeze = node_.op_type == "Unsqueeze";
    std::vector<std::int64_t> axes = node_.opset >= 13 ? ints_from(node_, in_, 1, "axes") : node_.get_ints("axes");
    if (axes.empty()) refuse(node_, "squeezing every axis of extent 1 (a rank's block may have one row)");
    const std::int64_t rank = rank_of(0), out_rank = unsqueeze ? rank + static_cast<std::int64_t>(axes.size()) : rank;
    std::set<int> listed;
    for (std::int64_t a : axes) listed.insert(normalized_axis(node_, a, out_rank));
    std::vector<int> map(static_cast<std::size_t>(rank));
    int next = 0;
    for (int a = 0; a < (unsqueeze ? out_rank : rank); ++a) {
      if (listed.count(a) != 0) {
        if (!unsqueeze && l.splits(a)) refuse(node_, "it squeezes split axis " + std::to_string(a));
        continue;
      }
      if (unsqueeze) {
        map[static_cast<std::size_t>(next++)] = a;
      } else {
        map[static_cast<std::size_t>(a)] = next++;
      }
    }
    return local({l.moved([map](int a) { return map[static_cast<std::size_t>(a)]; })});
  }

  // The share of a mean over axes that include the split ones that this block holds.
  double block_share(const Layout& l, const std::set<int>& axes) const {
    double share = 1.0;
    for (int a : {l.lat_axis, l.lon_axis}) {
      if (a < 0 || axes.count(a) == 0) continue;
      const std::int64_t global = a == l.lat_axis ? l.grid->global_lat() : l.grid->global_lon();
      share *= static_cast<double>(in_[0].shape()[static_cast<std::size_t>(a)]) / static_cast<double>(global);
    }
    return share;
  }

  Builder global_average() {
    const Layout& l = require_split_x();
    if (l.lat_axis < 2 || (l.lon_axis >= 0 && l.lon_axis < 2)) refuse(node_, "X is " + l.str());
    std::set<int> spatial;
    for (int a = 2; a < rank_of(0); ++a) spatial.insert(a);
    const double share = block_share(l, spatial);
    return [this, share] { return std::make_unique<GlobalSumOp>(std::move(op_), layouts_, p_.comm(), share); };
  }

  Builder reduce() {
    const Layout& l = x();
    const std::string& type = node_.op_type;
    const bool axes_input = (type == "ReduceSum" && node_.opset >= 13) || node_.opset >= 18;
    std::vector<std::int64_t> axes = axes_input ? ints_from(node_, in_, 1, "axes") : node_.get_ints("axes");
    if (axes.empty() && node_.get_int("noop_with_empty_axes", 0) != 0) refuse(node_, "noop_with_empty_axes");
    std::set<int> reduced;
    for (std::int64_t a : axes) reduced.insert(normalized_axis(node_, a, rank_of(0)));
    if (axes.empty()) {
      for (int a = 0; a < rank_of(0); ++a) reduced.insert(a);
    }
    const bool keepdims = node_.get_int("keepdims", 1) != 0;
    std::vector<int> split_axes;
    if (l.kind == Layout::Kind::flat) split_axes = {l.flat_axis};
    else for (int a : {l.lat_axis, l.lon_axis}) if (a >= 0) split_axes.push_back(a);
    const std::size_t covered = static_cast<std::size_t>(std::count_if(split_axes.begin(), split_axes.end(), [&](int a) { return reduced.count(a) != 0; }));
    if (covered == 0) {
      if (l.kind != Layout::Kind::split) refuse(node_, "X is " + l.str());
      auto map = [reduced, keepdims](int a) {
        return keepdims ? a : a - static_cast<int>(std::count_if(reduced.begin(), reduced.end(), [a](int r) { return r < a; }));
      };
      return local({l.moved(map)});
    }
    if (covered != split_axes.size()) refuse(node_, "it reduces some of the split axes only");
    if (type == "ReduceSum") return [this] { return std::make_unique<GlobalSumOp>(std::move(op_), layouts_, p_.comm(), 1.0); };
    if (type == "ReduceMean" && l.kind == Layout::Kind::split) {
      const double share = block_share(l, reduced);
      return [this, share] { return std::make_unique<GlobalSumOp>(std::move(op_), layouts_, p_.comm(), share); };
    }
    refuse(node_, type + " over the split axes (tessera sums and averages across ranks only)");
  }

  Builder instance_norm() {
    const Layout& l = x();
    require_whole(1);
    const bool spatial = l.kind == Layout::Kind::flat ? l.flat_axis >= 2
                                                     : (l.kind == Layout::Kind::split && l.lat_axis >= 2 && (l.lon_axis < 0 || l.lon_axis >= 2));
    if (!spatial) refuse(node_, "X is " + l.str() + " (it normalises over axes 2 and on)");
    return [this] { return std::make_unique<SplitInstanceNormOp>(node_, layouts_, p_.comm()); };
  }

  Builder layer_norm() {
    const Layout& l = require_split_x();
    require_whole(1);
    const int axis = normalized_axis(node_, node_.get_int("axis", -1), rank_of(0));
    if (l.lat_axis >= axis || l.lon_axis >= axis) refuse(node_, "it normalises over split axes (from axis " + std::to_string(axis) + ")");
    return local(same_for_outputs(l));
  }

  Builder softmax() {
    const Layout& l = require_split_x();
    const std::int64_t rank = rank_of(0);
    const int axis = normalized_axis(node_, node_.get_int("axis", node_.opset >= 13 ? -1 : 1), rank);
    const bool mixes = node_.opset >= 13 ? l.splits(axis) : (l.lat_axis >= axis || l.lon_axis >= axis);
    if (mixes) refuse(node_, "it normalises along a split axis");
    return local({l});
  }

  Builder matmul() {
    const Layout& l = require_split_x();
    if (!layouts_[1].is_whole()) refuse(node_, "its second input '" + node_.inputs[1] + "' is " + layouts_[1].str());
    if (rank_of(1) > 2) refuse(node_, "a batched MatMul with a split first input");
    if (l.splits(static_cast<int>(rank_of(0)) - 1)) refuse(node_, "it contracts split axis " + std::to_string(rank_of(0) - 1));
    if (rank_of(0) < 2) refuse(node_, "a split vector input");
    return local({l});
  }

  Builder gemm() {
    const Layout& l = require_split_x();
    require_whole(1);
    if (l.lat_axis != 0 || l.lon_axis >= 0 || node_.get_int("transA", 0) != 0) {
      refuse(node_, "Gemm runs split only on rows of A split along axis 0 (A is " + l.str() + ")");
    }
    if (in_.size() > 2 && in_[2].defined() && rank_of(2) == 2 && in_[2].shape()[0] != 1) {
      refuse(node_, "C has a row per row of A; it would have to be split like A");
    }
    return local({l});
  }

  Builder gather() {
    const Layout& l = require_split_x();
    require_whole(1);
    const int axis = normalized_axis(node_, node_.get_int("axis", 0), rank_of(0));
    if (l.splits(axis)) refuse(node_, "it gathers along split axis " + std::to_string(axis));
    const int grow = static_cast<int>(rank_of(1)) - 1;
    return local({l.moved([axis, grow](int a) { return a > axis ? a + grow : a; })});
  }

  DomainPlacement& p_;
  const NodeSpec& node_;
  std::unique_ptr<Op>& op_;
  const std::vector<Value>& in_;
  const std::vector<Layout>& layouts_;
};

}  // namespace

DomainPlacement::DomainPlacement(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs,
                                 const std::vector<GraphValue>& graph_inputs, const OpRegistry& registry)
    : decomposition_(&decomposition), registry_(&registry),
      base_(std::shared_ptr<const domain::Decomposition>(std::shared_ptr<void>{}, &decomposition)) {
  grids_[std::to_string(decomposition.global_lat()) + " x " + std::to_string(decomposition.global_lon())] = base_;
  if (inputs.empty() && !graph_inputs.empty()) inputs.push_back(SplitInput{graph_inputs[0].name});
  for (const SplitInput& s : inputs) {
    if (std::none_of(graph_inputs.begin(), graph_inputs.end(), [&](const GraphValue& v) { return v.name == s.input; })) {
      throw InvalidArgument("the split input '" + s.input + "' is not an input of the graph");
    }
  }
  for (const GraphValue& v : graph_inputs) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const SplitInput& s) { return s.input == v.name; });
    if (it == inputs.end()) {
      input_layouts_.push_back(Layout::whole());
      local_shapes_.push_back(v.shape);
      continue;
    }
    const auto rank = static_cast<std::int64_t>(v.shape.size());
    const std::string what = "input '" + v.name + "' " + shape_str(v.shape);
    auto axis_of = [&](int a, const char* name) {
      if (a < -rank || a >= rank) throw InvalidArgument(what + " has no " + name + " axis " + std::to_string(a));
      return a < 0 ? a + static_cast<int>(rank) : a;
    };
    const int lat = axis_of(it->lat_axis, "latitude");
    const int lon = it->has_lon ? axis_of(it->lon_axis, "longitude") : -1;
    const std::int64_t lon_extent = lon >= 0 ? v.shape[static_cast<std::size_t>(lon)] : 1;
    if (lat == lon || v.shape[static_cast<std::size_t>(lat)] != decomposition.global_lat() ||
        lon_extent != decomposition.global_lon()) {
      throw InvalidArgument(what + " split along axes (" + std::to_string(lat) + ", " + std::to_string(lon) +
                            ") does not hold the decomposition's " + std::to_string(decomposition.global_lat()) + " x " +
                            std::to_string(decomposition.global_lon()) + " field");
    }
    Shape local = v.shape;
    local[static_cast<std::size_t>(lat)] = decomposition.box().lat.length;
    if (lon >= 0) local[static_cast<std::size_t>(lon)] = decomposition.box().lon.length;
    input_layouts_.push_back(Layout::split(lat, lon, base_));
    local_shapes_.push_back(local);
  }
}

bool DomainPlacement::blocks_divide(const domain::Decomposition& grid, std::int64_t lat, std::int64_t lon) {
  for (int rank = 0; rank < grid.size(); ++rank) {
    const domain::LocalBox box = grid.box_of(rank);
    if (box.lat.start % lat != 0 || box.lat.length % lat != 0 || box.lon.start % lon != 0 || box.lon.length % lon != 0) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const domain::Decomposition> DomainPlacement::scaled_grid(const Grid& grid, std::int64_t lat_num,
                                                                          std::int64_t lat_den, std::int64_t lon_num,
                                                                          std::int64_t lon_den) {
  const std::int64_t lat = grid->global_lat() * lat_num / lat_den, lon = grid->global_lon() * lon_num / lon_den;
  const std::string key = std::to_string(lat) + " x " + std::to_string(lon);
  if (auto it = grids_.find(key); it != grids_.end()) return it->second;
  const domain::LocalBox box = grid->box();
  const domain::LocalBox scaled{{box.lat.start * lat_num / lat_den, box.lat.length * lat_num / lat_den},
                                {box.lon.start * lon_num / lon_den, box.lon.length * lon_num / lon_den}};
  auto made = std::make_shared<const domain::Decomposition>(domain::Decomposition::from_boxes(comm(), {1, lat, lon}, scaled));
  grids_[key] = made;
  return made;
}

std::unique_ptr<Op> DomainPlacement::place(const NodeSpec& node, std::unique_ptr<Op>& op, const std::vector<Value>& inputs,
                                           const std::vector<Layout>& layouts) {
  if (std::none_of(layouts.begin(), layouts.end(), [](const Layout& l) { return l.is_split_family(); })) {
    return std::move(op);
  }
  Builder build;
  Placer placer(*this, node, op, inputs, layouts);
  agree_on_success(comm().mpi_comm(), [&] { build = placer.decide(); });
  return build();
}

std::string DomainPlacement::describe(const Op& op) {
  const auto* split = dynamic_cast<const SplitOp*>(&op);
  return split ? split->describe() : "whole (the same on every rank)";
}

std::vector<Layout> DomainPlacement::output_layouts(const Op& op, const std::vector<Layout>& inputs,
                                                    std::size_t outputs) const {
  if (const auto* split = dynamic_cast<const SplitOp*>(&op)) {
    std::vector<Layout> layouts = split->output_layouts();
    layouts.resize(outputs, layouts.empty() ? Layout::whole() : layouts.front());
    return layouts;
  }
  const bool varies = std::any_of(inputs.begin(), inputs.end(), [](const Layout& l) { return !l.is_whole(); });
  return std::vector<Layout>(outputs, varies ? Layout::per_rank() : Layout::whole());
}

}  // namespace tessera::onnx
