// Placement rules for reductions and normalisations over the split axes (domain_rules.hpp).
#include <algorithm>
#include <set>

#include "onnx/domain_rules.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx::rules {

namespace {

// The share of a mean over axes that include the split ones that this block holds.
double block_share(const NodeView& v, const Layout& l, const std::set<int>& axes) {
  double share = 1.0;
  for (int a : {l.lat_axis, l.lon_axis}) {
    if (a < 0 || axes.count(a) == 0) continue;
    const std::int64_t global = a == l.lat_axis ? l.grid->global_lat() : l.grid->global_lon();
    share *= static_cast<double>(v.in[0].shape()[static_cast<std::size_t>(a)]) / static_cast<double>(global);
  }
  return share;
}

}  // namespace

Builder global_average(const NodeView& v) {
  const Layout& l = v.require_split_x();
  if (l.lat_axis < 2 || (l.lon_axis >= 0 && l.lon_axis < 2)) refuse(v.node, "X is " + l.str());
  std::set<int> spatial;
  for (int a = 2; a < v.rank_of(0); ++a) spatial.insert(a);
  const double share = block_share(v, l, spatial);
  return [&v, share] { return std::make_unique<GlobalSumOp>(std::move(v.op), v.layouts, v.placement.comm(), share); };
}

Builder reduce(const NodeView& v) {
  const Layout& l = v.x();
  const std::string& type = v.node.op_type;
  const bool axes_input = (type == "ReduceSum" && v.node.opset >= 13) || v.node.opset >= 18;
  std::vector<std::int64_t> axes = axes_input ? ints_from(v.node, v.in, 1, "axes") : v.node.get_ints("axes");
  if (axes.empty() && v.node.get_int("noop_with_empty_axes", 0) != 0) refuse(v.node, "noop_with_empty_axes");
  std::set<int> reduced;
  for (std::int64_t a : axes) reduced.insert(normalized_axis(v.node, a, v.rank_of(0)));
  if (axes.empty()) {
    for (int a = 0; a < v.rank_of(0); ++a) reduced.insert(a);
  }
  const bool keepdims = v.node.get_int("keepdims", 1) != 0;
  std::vector<int> split_axes;
  if (l.kind == Layout::Kind::flat) split_axes = {l.flat_axis};
  else for (int a : {l.lat_axis, l.lon_axis}) if (a >= 0) split_axes.push_back(a);
  const std::size_t covered = static_cast<std::size_t>(std::count_if(split_axes.begin(), split_axes.end(), [&](int a) { return reduced.count(a) != 0; }));
  if (covered == 0) {
    if (l.kind != Layout::Kind::split) refuse(v.node, "X is " + l.str());
    auto map = [reduced, keepdims](int a) {
      return keepdims ? a : a - static_cast<int>(std::count_if(reduced.begin(), reduced.end(), [a](int r) { return r < a; }));
    };
    return v.local({l.moved(map)});
  }
  if (covered != split_axes.size()) refuse(v.node, "it reduces some of the split axes only");
  if (type == "ReduceSum") return [&v] { return std::make_unique<GlobalSumOp>(std::move(v.op), v.layouts, v.placement.comm(), 1.0); };
  if (type == "ReduceMean" && l.kind == Layout::Kind::split) {
    const double share = block_share(v, l, reduced);
    return [&v, share] { return std::make_unique<GlobalSumOp>(std::move(v.op), v.layouts, v.placement.comm(), share); };
  }
  refuse(v.node, type + " over the split axes (tessera sums and averages across ranks only)");
}

Builder instance_norm(const NodeView& v) {
  const Layout& l = v.x();
  v.require_whole(1);
  const bool spatial = l.kind == Layout::Kind::flat ? l.flat_axis >= 2
                                                   : (l.kind == Layout::Kind::split && l.lat_axis >= 2 && (l.lon_axis < 0 || l.lon_axis >= 2));
  if (!spatial) refuse(v.node, "X is " + l.str() + " (it normalises over axes 2 and on)");
  return [&v] { return std::make_unique<SplitInstanceNormOp>(v.node, v.layouts, v.placement.comm()); };
}

}  // namespace tessera::onnx::rules
