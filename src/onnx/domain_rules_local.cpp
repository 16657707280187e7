// Placement rules for ops that run on the block as they are (domain_rules.hpp).
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "onnx/domain_rules.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::rules {

Builder pointwise(const NodeView& v) {
  std::int64_t out_rank = 0;
  for (std::size_t i = 0; i < v.in.size(); ++i) {
    if (v.in[i].defined()) out_rank = std::max(out_rank, v.rank_of(i));
  }
  std::optional<Layout> common;
  for (std::size_t i = 0; i < v.in.size(); ++i) {
    if (!v.in[i].defined() || !v.layouts[i].is_split_family()) continue;
    const std::int64_t shift = out_rank - v.rank_of(i);
    Layout aligned = v.layouts[i].moved([shift](int a) { return static_cast<int>(a + shift); });
    if (aligned.kind == Layout::Kind::flat) aligned.flat_axis += static_cast<int>(shift);
    if (common && !same_split(*common, aligned)) {
      refuse(v.node, "its inputs are split differently (" + common->str() + " and " + aligned.str() + ")");
    }
    common = aligned;
  }
  for (std::size_t i = 0; i < v.in.size(); ++i) {
    if (!v.in[i].defined() || v.layouts[i].is_split_family()) continue;
    if (v.layouts[i].kind == Layout::Kind::per_rank) {
      refuse(v.node, "input '" + v.node.inputs[i] + "' differs between ranks (it was read off a split value)");
    }
    const std::int64_t shift = out_rank - v.rank_of(i);
    for (int axis : {common->lat_axis, common->lon_axis, common->kind == Layout::Kind::flat ? common->flat_axis : -1}) {
      const std::int64_t own = axis - shift;
      if (axis >= 0 && own >= 0 && v.in[i].shape()[own] != 1) {
        refuse(v.node, "input '" + v.node.inputs[i] + "' is a whole tensor " + v.in[i].str() +
                          " of extent " + std::to_string(v.in[i].shape()[own]) + " along split axis " +
                          std::to_string(axis) + "; it would have to be split like the field");
      }
    }
  }
  return v.local(v.same_for_outputs(*common));
}

Builder batch_norm(const NodeView& v) {
  const Layout& l = v.require_split_x();
  if (l.splits(1)) refuse(v.node, "its channel axis 1 is split");
  v.require_whole(1);
  return v.local(v.same_for_outputs(l));
}

Builder concat(const NodeView& v) {
  const int axis = normalized_axis(v.node, v.node.require_int("axis"), v.rank_of(0));
  const Layout* s = first_split(v.layouts);
  if (s->splits(axis) || s->slice_axis == axis) return wrap(v, axis);
  for (std::size_t i = 0; i < v.layouts.size(); ++i) {
    if (!same_split(v.layouts[i], v.x())) {
      refuse(v.node, "input '" + v.node.inputs[i] + "' is " + v.layouts[i].str() + " and input '" + v.node.inputs[0] +
                        "' " + v.x().str() + "; a split Concat joins fields split alike");
    }
  }
  if (v.x().kind != Layout::Kind::split) refuse(v.node, "input '" + v.node.inputs[0] + "' is " + v.x().str());
  return v.local({v.x()});
}

Builder split_op(const NodeView& v) {
  const Layout& l = v.require_split_x();
  const int axis = normalized_axis(v.node, v.node.get_int("axis", 0), v.rank_of(0));
  if (l.splits(axis)) refuse(v.node, "it splits along split axis " + std::to_string(axis));
  v.require_whole(1);
  return v.local(v.same_for_outputs(l));
}

Builder transpose(const NodeView& v) {
  const Layout& l = v.require_split_x();
  std::vector<std::int64_t> perm = v.node.get_ints("perm");
  if (perm.empty()) {
    perm.resize(static_cast<std::size_t>(v.rank_of(0)));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  auto where = [perm](int a) {
    return static_cast<int>(std::find(perm.begin(), perm.end(), a) - perm.begin());
  };
  return v.local({l.moved(where)});
}

// Reshape/Flatten: decided from the first forward's shapes (a Reshape's target comes
// from values): the leading axes only; the split axes merged, with leading ones, into
// the last axis (GroupNorm's [N, C, lat, lon] -> [N, G, C/G * lat * lon]: each row of
// the result is whole blocks of this rank's field); or back to the shape it had.
Builder reshape(const NodeView& v) {
  // The target shape may be read off this rank's block (Shape of it): that is what
  // makes the Reshape back after a GroupNorm local.
  if (v.layouts.size() > 1 && v.layouts[1].is_split_family()) refuse(v.node, "its shape input is a split value");
  const Layout l = v.x();
  if (l.kind != Layout::Kind::split && l.kind != Layout::Kind::flat) refuse(v.node, "X is " + l.str());
  const NodeSpec node = v.node;
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
  return [&v, rule] { return std::make_unique<LocalOp>(std::move(v.op), v.layouts, v.placement.comm(), rule); };
}

Builder squeeze(const NodeView& v) {
  const Layout& l = v.require_split_x();
  v.require_whole(1);
  const bool unsqueeze = v.node.op_type == "Unsqueeze";
  std::vector<std::int64_t> axes = v.node.opset >= 13 ? ints_from(v.node, v.in, 1, "axes") : v.node.get_ints("axes");
  if (axes.empty()) refuse(v.node, "squeezing every axis of extent 1 (a rank's block may have one row)");
  const std::int64_t rank = v.rank_of(0), out_rank = unsqueeze ? rank + static_cast<std::int64_t>(axes.size()) : rank;
  std::set<int> listed;
  for (std::int64_t a : axes) listed.insert(normalized_axis(v.node, a, out_rank));
  std::vector<int> map(static_cast<std::size_t>(rank));
  int next = 0;
  for (int a = 0; a < (unsqueeze ? out_rank : rank); ++a) {
    if (listed.count(a) != 0) {
      if (!unsqueeze && l.splits(a)) refuse(v.node, "it squeezes split axis " + std::to_string(a));
      continue;
    }
    if (unsqueeze) {
      map[static_cast<std::size_t>(next++)] = a;
    } else {
      map[static_cast<std::size_t>(a)] = next++;
    }
  }
  return v.local({l.moved([map](int a) { return map[static_cast<std::size_t>(a)]; })});
}

Builder layer_norm(const NodeView& v) {
  const Layout& l = v.require_split_x();
  v.require_whole(1);
  const int axis = normalized_axis(v.node, v.node.get_int("axis", -1), v.rank_of(0));
  if (l.lat_axis >= axis || l.lon_axis >= axis) refuse(v.node, "it normalises over split axes (from axis " + std::to_string(axis) + ")");
  return v.local(v.same_for_outputs(l));
}

Builder softmax(const NodeView& v) {
  const Layout& l = v.require_split_x();
  const std::int64_t rank = v.rank_of(0);
  const int axis = normalized_axis(v.node, v.node.get_int("axis", v.node.opset >= 13 ? -1 : 1), rank);
  const bool mixes = v.node.opset >= 13 ? l.splits(axis) : (l.lat_axis >= axis || l.lon_axis >= axis);
  if (mixes) refuse(v.node, "it normalises along a split axis");
  return v.local({l});
}

Builder matmul(const NodeView& v) {
  const Layout& l = v.require_split_x();
  if (!v.layouts[1].is_whole()) refuse(v.node, "its second input '" + v.node.inputs[1] + "' is " + v.layouts[1].str());
  if (v.rank_of(1) > 2) refuse(v.node, "a batched MatMul with a split first input");
  if (l.splits(static_cast<int>(v.rank_of(0)) - 1)) refuse(v.node, "it contracts split axis " + std::to_string(v.rank_of(0) - 1));
  if (v.rank_of(0) < 2) refuse(v.node, "a split vector input");
  return v.local({l});
}

Builder gemm(const NodeView& v) {
  const Layout& l = v.require_split_x();
  v.require_whole(1);
  if (l.lat_axis != 0 || l.lon_axis >= 0 || v.node.get_int("transA", 0) != 0) {
    refuse(v.node, "Gemm runs split only on rows of A split along axis 0 (A is " + l.str() + ")");
  }
  if (v.in.size() > 2 && v.in[2].defined() && v.rank_of(2) == 2 && v.in[2].shape()[0] != 1) {
    refuse(v.node, "C has a row per row of A; it would have to be split like A");
  }
  return v.local({l});
}

Builder gather(const NodeView& v) {
  const Layout& l = v.require_split_x();
  v.require_whole(1);
  const int axis = normalized_axis(v.node, v.node.get_int("axis", 0), v.rank_of(0));
  if (l.splits(axis)) refuse(v.node, "it gathers along split axis " + std::to_string(axis));
  const int grow = static_cast<int>(v.rank_of(1)) - 1;
  return v.local({l.moved([axis, grow](int a) { return a > axis ? a + grow : a; })});
}

}  // namespace tessera::onnx::rules
