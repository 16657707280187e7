// Placement rules for windows and the padding they read (domain_rules.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "onnx/domain_rules.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::rules {

namespace {

std::unique_ptr<Op> rebuilt(const OpRegistry& registry, NodeSpec node) { return registry.create(node); }

}  // namespace

// Conv and pools: the halo the window reads beyond the block.
Builder halo_window(const NodeView& v) {
  const Layout& l = v.x();
  if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::padded) refuse(v.node, "input 'X' is " + l.str());
  if (v.rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) {
    refuse(v.node, "a split " + v.node.op_type + " runs on [N, C, lat, lon] split along its last two axes; X is " + l.str());
  }
  v.require_whole(1);
  const bool conv = v.node.op_type == "Conv", max_pool = v.node.op_type == "MaxPool";
  if (v.node.outputs.size() > 1 && !v.node.outputs[1].empty()) refuse(v.node, "its Indices output is not split");
  if (v.node.get_int("ceil_mode", 0) != 0) refuse(v.node, "ceil_mode 1");
  const std::string auto_pad = v.node.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") refuse(v.node, "auto_pad " + auto_pad + " (give explicit pads)");
  Shape kernel = conv ? Shape(v.in[1].shape().begin() + 2, v.in[1].shape().end()) : v.node.require_ints("kernel_shape");
  if (kernel.size() != 2) refuse(v.node, "a " + std::to_string(kernel.size()) + "-d window");
  const Shape pads = auto_pad == "VALID" ? Shape(4, 0) : v.node.get_ints("pads", Shape(4, 0));
  const Shape strides = v.node.get_ints("strides", Shape(2, 1)), dilations = v.node.get_ints("dilations", Shape(2, 1));
  if (v.node.op_type == "AveragePool" && v.node.get_int("count_include_pad", 0) == 0 &&
      std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p != 0; })) {
    refuse(v.node, "pads with count_include_pad 0 (each rank would count its halo)");
  }
  const EdgeFill own_fill = max_pool ? EdgeFill::lowest : EdgeFill::zero;
  std::array<EdgePadding, 4> edges{};
  for (int a = 0; a < 2; ++a) {
    const std::int64_t k = kernel[a], s = strides[a], d = dilations[a], reach = d * (k - 1);
    const EdgePadding lazy_b = l.pads[2 * a], lazy_a = l.pads[2 * a + 1];
    if ((lazy_b.width > 0 && pads[a] > 0) || (lazy_a.width > 0 && pads[a + 2] > 0)) {
      refuse(v.node, "it pads an edge the graph already padded (a Pad or wrap before it, and pads " +
                        shape_str(pads) + ")");
    }
    const std::int64_t before = lazy_b.width + pads[a], after_total = lazy_a.width + pads[a + 2];
    const std::int64_t global = a == 0 ? l.grid->global_lat() : l.grid->global_lon();
    const std::int64_t out = (global + before + after_total - reach - 1) / s + 1;
    if (global % s != 0 || out != global / s) {
      refuse(v.node, "along " + std::string(a == 0 ? "latitude" : "longitude") + " its output (" + std::to_string(out) +
                        ") is not the field's " + std::to_string(global) + " / stride " + std::to_string(s) +
                        " on the same blocks (the split keeps the grid: 'same' padding)");
    }
    const std::int64_t after = std::max<std::int64_t>(0, reach - before - s + 1);
    if (lazy_a.width > 0 && after > lazy_a.width) refuse(v.node, "its window reaches past the graph's padding");
    edges[2 * a] = {before, lazy_b.width > 0 ? lazy_b.fill : own_fill};
    edges[2 * a + 1] = {after, lazy_a.width > 0 ? lazy_a.fill : own_fill};
    if (lazy_b.fill == EdgeFill::periodic && lazy_b.width > 0) edges[2 * a + 1].fill = EdgeFill::periodic;
    if (lazy_a.fill == EdgeFill::periodic && lazy_a.width > 0) edges[2 * a].fill = EdgeFill::periodic;
  }
  if (!DomainPlacement::blocks_divide(*l.grid, strides[0], strides[1])) {
    refuse(v.node, "stride " + shape_str(strides) + " does not divide every rank's block of " + l.str());
  }
  NodeSpec inner = v.node;
  inner.attributes.erase("auto_pad");
  inner.attributes["pads"].kind = Attribute::Kind::integers;
  inner.attributes["pads"].ints = Shape(4, 0);
  return [&v, inner, edges, strides, l] {
    const Grid out_grid = strides[0] == 1 && strides[1] == 1 ? l.grid : v.placement.scaled_grid(l.grid, 1, strides[0], 1, strides[1]);
    const bool any = std::any_of(edges.begin(), edges.end(), [](const EdgePadding& e) { return e.width > 0; });
    auto halo = any ? std::make_unique<SplitHalo>(*l.grid, edges, v.node.where()) : nullptr;
    return std::make_unique<HaloOp>(rebuilt(v.placement.registry(), inner), v.layouts, v.placement.comm(), std::move(halo),
                                    Layout::split(2, 3, out_grid), HaloCrop{}, nullptr);
  };
}

Builder conv_transpose(const NodeView& v) {
  const Layout& l = v.require_split_x();
  if (v.rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) refuse(v.node, "X is " + l.str());
  v.require_whole(1);
  const Shape kernel(v.in[1].shape().begin() + 2, v.in[1].shape().end());
  const Shape strides = v.node.get_ints("strides", Shape(2, 1));
  const Shape pads = v.node.get_ints("pads", Shape(4, 0)), dilations = v.node.get_ints("dilations", Shape(2, 1));
  const Shape out_pad = v.node.get_ints("output_padding", Shape(2, 0));
  const bool tiles = kernel == strides && std::all_of(pads.begin(), pads.end(), [](std::int64_t p) { return p == 0; }) &&
                     dilations == Shape{1, 1} && out_pad == Shape{0, 0} && !v.node.has("output_shape") &&
                     v.node.get_string("auto_pad", "NOTSET") == "NOTSET";
  if (!tiles) refuse(v.node, "only a ConvTranspose whose kernel equals its stride (no overlap, no pads) runs split");
  return [&v, strides, l] {
    Layout out = Layout::split(2, 3, v.placement.scaled_grid(l.grid, strides[0], 1, strides[1], 1));
    return std::make_unique<LocalOp>(std::move(v.op), v.layouts, v.placement.comm(), fixed({out}));
  };
}

Builder resize(const NodeView& v) {
  const Layout& l = v.require_split_x();
  if (v.rank_of(0) != 4 || l.lat_axis != 2 || l.lon_axis != 3) refuse(v.node, "X is " + l.str());
  const bool upsample = v.node.op_type == "Upsample";
  const std::string mode = v.node.get_string("mode", "nearest");
  const std::string transform = upsample ? "asymmetric" : v.node.get_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = upsample ? "floor" : v.node.get_string("nearest_mode", "round_prefer_floor");
  // The factor along each split axis, from the scales or the sizes.
  std::vector<double> scales;
  Shape sizes;
  const std::size_t scales_at = upsample || v.node.opset < 11 ? 1 : 2;
  if (upsample && v.node.has("scales")) {
    scales = v.node.get_floats("scales");
  } else if (scales_at < v.in.size() && v.in[scales_at].defined() && v.in[scales_at].numel() > 0) {
    const Tensor s = v.in[scales_at].tensor;
    if (s.dtype() == DType::f32) {
      for (float f : s.to_vector<float>()) scales.push_back(f);
    } else {
      scales = s.to_vector<double>();
    }
  } else if (v.in.size() > 3 && v.in[3].defined()) {
    sizes = v.in[3].to_ints(v.node.where() + ": sizes");
  }
  if (v.node.has("axes") || (scales.size() != 4 && sizes.size() != 4)) refuse(v.node, "scales or sizes for some axes only");
  std::int64_t factor[2];
  for (int a = 0; a < 2; ++a) {
    const std::int64_t global = a == 0 ? l.grid->global_lat() : l.grid->global_lon();
    const double f = sizes.empty() ? scales[2 + a] : static_cast<double>(sizes[2 + a]) / static_cast<double>(global);
    factor[a] = static_cast<std::int64_t>(f);
    if (f < 1.0 || static_cast<double>(factor[a]) != f) {
      refuse(v.node, "only an integer upsampling factor keeps the blocks (factor " + std::to_string(f) + ")");
    }
  }
  const bool half_pixel = transform == "half_pixel" || transform == "pytorch_half_pixel";
  if (!half_pixel && transform != "asymmetric") refuse(v.node, "coordinate_transformation_mode " + transform);
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
        if (index > 0.0) refuse(v.node, "nearest_mode " + nearest + " with " + transform + " reads across blocks");
      }
    }
  } else if (mode == "linear") {
    edges = {EdgePadding{1, EdgeFill::replicate}, EdgePadding{1, EdgeFill::replicate},
             EdgePadding{1, EdgeFill::replicate}, EdgePadding{1, EdgeFill::replicate}};
    crop = {factor[0], factor[1]};
  } else {
    refuse(v.node, "mode " + mode);
  }
  const std::int64_t f_lat = factor[0], f_lon = factor[1];
  const bool rewrite_sizes = !sizes.empty();
  return [&v, edges, crop, l, f_lat, f_lon, rewrite_sizes] {
    const Grid out_grid = v.placement.scaled_grid(l.grid, f_lat, 1, f_lon, 1);
    auto halo = crop.lat != 0 ? std::make_unique<SplitHalo>(*l.grid, edges, v.node.where()) : nullptr;
    HaloOp::InputRewrite rewrite;
    if (rewrite_sizes) {
      rewrite = [f_lat, f_lon](std::vector<Value>& inputs, const Tensor& haloed) {
        std::vector<std::int64_t> sizes = inputs[3].to_ints("sizes");
        sizes[2] = haloed.size(2) * f_lat;
        sizes[3] = haloed.size(3) * f_lon;
        inputs[3] = Value::integers(sizes, {4});
      };
    }
    return std::make_unique<HaloOp>(std::move(v.op), v.layouts, v.placement.comm(), std::move(halo), Layout::split(2, 3, out_grid),
                                    crop, rewrite);
  };
}

// Concat([Slice(v, last w), v, Slice(v, first w)], axis): v padded periodically.
Builder wrap(const NodeView& v, int axis) {
  std::size_t source = v.layouts.size();
  for (std::size_t i = 0; i < v.layouts.size(); ++i) {
    if (v.layouts[i].kind == Layout::Kind::split || v.layouts[i].kind == Layout::Kind::padded) {
      if (source != v.layouts.size()) refuse(v.node, "it joins two split values along split axis " + std::to_string(axis));
      source = i;
    }
  }
  const std::string not_wrap = "along split axis " + std::to_string(axis) +
                               " only a periodic wrap [last columns, field, first columns] runs split";
  if (source == v.layouts.size() || source > 1 || v.layouts.size() - source > 2) refuse(v.node, not_wrap);
  Layout out = v.layouts[source];
  const int edge = axis == out.lat_axis ? 0 : 2;
  for (std::size_t i = 0; i < v.layouts.size(); ++i) {
    if (i == source) continue;
    const Layout& e = v.layouts[i];
    const bool before = i < source;
    if (e.kind != Layout::Kind::edge_slice || e.slice_source != v.node.inputs[source] || e.slice_axis != axis ||
        e.slice_last != before) {
      refuse(v.node, not_wrap);
    }
    EdgePadding& pad = out.pads[edge + (before ? 0 : 1)];
    if (pad.width != 0) refuse(v.node, "it wraps an edge the graph already padded");
    pad = {e.slice_width, EdgeFill::periodic};
  }
  out.kind = Layout::Kind::padded;
  for (int e : {edge, edge + 1}) {
    if (out.pads[e].width == 0) out.pads[e].fill = EdgeFill::periodic;
  }
  return [&v, source, out] { return std::make_unique<PassOp>(v.node, v.layouts, v.placement.comm(), source, out); };
}

Builder slice(const NodeView& v) {
  const Layout& l = v.require_split_x();
  v.require_whole(1);
  const bool attrs = v.node.opset < 10;
  const std::vector<std::int64_t> starts = ints_from(v.node, attrs ? std::vector<Value>{} : v.in, 1, "starts");
  const std::vector<std::int64_t> ends = ints_from(v.node, attrs ? std::vector<Value>{} : v.in, 2, "ends");
  std::vector<std::int64_t> axes = ints_from(v.node, attrs ? std::vector<Value>{} : v.in, 3, "axes");
  const std::vector<std::int64_t> steps = attrs ? std::vector<std::int64_t>{} : ints_from(v.node, v.in, 4, "steps");
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  int split_axis = -1;
  std::size_t which = 0;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const int a = normalized_axis(v.node, axes[k], v.rank_of(0));
    if (!l.splits(a)) continue;
    if (axes.size() != 1) refuse(v.node, "it slices split axis " + std::to_string(a) + " together with other axes");
    split_axis = a;
    which = k;
  }
  if (split_axis < 0) return v.local({l});
  if (!steps.empty() && steps[which] != 1) refuse(v.node, "a step along split axis " + std::to_string(split_axis));
  const std::int64_t global = split_axis == l.lat_axis ? l.grid->global_lat() : l.grid->global_lon();
  auto clamp = [global](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + global : i, 0, global); };
  const std::int64_t s = clamp(starts[which]), e = clamp(ends[which]);
  Layout out = l;
  out.kind = Layout::Kind::edge_slice;
  out.slice_axis = split_axis;
  out.slice_source = v.node.inputs[0];
  if (s == 0 && e > 0 && e < global) {
    out.slice_last = false;
    out.slice_width = e;
  } else if (e == global && s > 0 && s < global) {
    out.slice_last = true;
    out.slice_width = global - s;
  } else {
    refuse(v.node, "along split axis " + std::to_string(split_axis) + " it keeps [" + std::to_string(s) + ", " +
                      std::to_string(e) + ") of " + std::to_string(global) +
                      "; only the first or last columns of a periodic wrap run split");
  }
  return [&v, out] { return std::make_unique<PassOp>(v.node, v.layouts, v.placement.comm(), 0, out); };
}

Builder pad(const NodeView& v) {
  const Layout& l = v.x();
  if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::padded) refuse(v.node, "X is " + l.str());
  v.require_whole(1);
  const std::vector<std::int64_t> pads = v.node.opset < 11 ? v.node.get_ints("pads") : ints_from(v.node, v.in, 1, "pads");
  if (v.in.size() > 3 && v.in[3].defined()) refuse(v.node, "the axes input");
  const std::int64_t rank = v.rank_of(0);
  if (static_cast<std::int64_t>(pads.size()) != 2 * rank) v.node.invalid("pads needs 2 entries per axis");
  const std::string mode = v.node.get_string("mode", "constant");
  EdgeFill fill = EdgeFill::zero;
  if (mode == "edge") fill = EdgeFill::replicate;
  else if (mode == "reflect") fill = EdgeFill::reflect;
  else if (mode == "wrap") fill = EdgeFill::periodic;
  else if (mode != "constant") refuse(v.node, "mode " + mode);
  if (mode == "constant") {
    double value = v.node.get_float("value", 0.0);
    if (v.node.opset >= 11 && v.in.size() > 2 && v.in[2].defined()) {
      const Tensor c = v.in[2].tensor;
      value = c.dtype() == DType::f32 ? c.to_vector<float>()[0] : c.dtype() == DType::f64 ? c.to_vector<double>()[0]
                                                                                           : static_cast<double>(c.to_vector<std::int64_t>()[0]);
    }
    if (value != 0.0) refuse(v.node, "constant padding with " + std::to_string(value) + " (only 0 runs split)");
  }
  Layout out = l;
  out.kind = Layout::Kind::padded;
  for (std::int64_t a = 0; a < rank; ++a) {
    const std::int64_t before = pads[a], after = pads[a + rank];
    if (before < 0 || after < 0) refuse(v.node, "negative pads (cropping) of a split axis");
    if (!l.splits(static_cast<int>(a))) {
      if (before != 0 || after != 0) refuse(v.node, "it pads whole axis " + std::to_string(a) + " as well");
      continue;
    }
    const int edge = a == l.lat_axis ? 0 : 2;
    for (int side = 0; side < 2; ++side) {
      const std::int64_t width = side == 0 ? before : after;
      if (width == 0 && fill != EdgeFill::periodic) continue;
      if (out.pads[edge + side].width != 0) refuse(v.node, "it pads an edge the graph already padded");
      out.pads[edge + side] = {width, fill};
    }
  }
  return [&v, out] { return std::make_unique<PassOp>(v.node, v.layouts, v.placement.comm(), 0, out); };
}

}  // namespace tessera::onnx::rules
