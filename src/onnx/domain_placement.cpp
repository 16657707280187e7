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
#include "onnx/domain_rules.hpp"
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

namespace rules {

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

std::vector<std::int64_t> ints_from(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index,
                                    const std::string& attribute) {
  if (index < inputs.size() && inputs[index].defined()) return inputs[index].to_ints(node.where() + ": " + attribute);
  return node.get_ints(attribute);
}

const Layout* first_split(const std::vector<Layout>& layouts) {
  for (const Layout& l : layouts) {
    if (l.is_split_family()) return &l;
  }
  return nullptr;
}

namespace {

bool same_grid(const Grid& a, const Grid& b) {
  return a == b || (a && b && a->global_lat() == b->global_lat() && a->global_lon() == b->global_lon());
}

}  // namespace

bool same_split(const Layout& a, const Layout& b) {
  return a.kind == b.kind && a.lat_axis == b.lat_axis && a.lon_axis == b.lon_axis && a.flat_axis == b.flat_axis &&
         same_grid(a.grid, b.grid);
}

LocalOp::LayoutRule fixed(std::vector<Layout> layouts) {
  return [layouts](const std::vector<Value>&, const std::vector<Value>&) { return layouts; };
}

Builder NodeView::keep() const {
  return [this] { return std::move(op); };
}

Builder NodeView::local(std::vector<Layout> outputs) const {
  return [this, outputs] { return std::make_unique<LocalOp>(std::move(op), layouts, placement.comm(), fixed(outputs)); };
}

void NodeView::require_whole(std::size_t from) const {
  for (std::size_t i = from; i < layouts.size(); ++i) {
    if (i < in.size() && in[i].defined() && !layouts[i].is_whole()) {
      refuse(node, "input '" + node.inputs[i] + "' is " + layouts[i].str() + "; tessera splits only input 0 of " +
                       node.op_type);
    }
  }
}

const Layout& NodeView::require_split_x() const {
  if (x().kind != Layout::Kind::split) refuse(node, "input '" + node.inputs[0] + "' is " + x().str());
  return x();
}

namespace {

// Padding still to come and the slices of a wrap are read only by the ops that take
// them over as a halo; GroupNorm's merged layout only by what runs on it.
void check_padding_readers(const NodeView& v) {
  static const std::set<std::string> readers = {"Conv", "MaxPool", "AveragePool", "Pad", "Concat"};
  const std::string& type = v.node.op_type;
  for (std::size_t i = 0; i < v.layouts.size(); ++i) {
    const Layout& l = v.layouts[i];
    if ((l.kind == Layout::Kind::padded || l.kind == Layout::Kind::edge_slice) && readers.count(type) == 0) {
      refuse(v.node, "input '" + v.node.inputs[i] + "' is the padding or wrap of a split field (" + l.str() +
                         "), which only Conv, MaxPool and AveragePool read split; pad right before them");
    }
    if (l.kind == Layout::Kind::flat && type != "Reshape" && type != "InstanceNormalization" &&
        pointwise_ops().count(type) == 0 && type != "ReduceSum") {
      refuse(v.node, "input '" + v.node.inputs[i] + "' merges the split axes into one (" + l.str() +
                         "); only elementwise ops, InstanceNormalization, ReduceSum and a Reshape back read it split");
    }
  }
}

// The rule for the node's op type (domain_rules.hpp).
Builder decide(const NodeView& v) {
  check_padding_readers(v);
  const std::string& type = v.node.op_type;
  if (type == "Shape" || type == "Size") return v.keep();
  if (pointwise_ops().count(type) != 0) return pointwise(v);
  if (type == "BatchNormalization") return batch_norm(v);
  if (type == "Conv" || type == "MaxPool" || type == "AveragePool") return halo_window(v);
  if (type == "ConvTranspose") return conv_transpose(v);
  if (type == "Resize" || type == "Upsample") return resize(v);
  if (type == "Concat") return concat(v);
  if (type == "Split") return split_op(v);
  if (type == "Slice") return slice(v);
  if (type == "Pad") return pad(v);
  if (type == "Transpose") return transpose(v);
  if (type == "Reshape" || type == "Flatten") return reshape(v);
  if (type == "Squeeze" || type == "Unsqueeze") return squeeze(v);
  if (type == "GlobalAveragePool") return global_average(v);
  if (type.rfind("Reduce", 0) == 0) return reduce(v);
  if (type == "InstanceNormalization") return instance_norm(v);
  if (type == "LayerNormalization") return layer_norm(v);
  if (type == "Softmax" || type == "LogSoftmax") return softmax(v);
  if (type == "MatMul") return matmul(v);
  if (type == "Gemm") return gemm(v);
  if (type == "Gather") return gather(v);
  refuse(v.node, "tessera has no split form of " + type + " (it reads " + v.x().str() + ")");
}

}  // namespace
}  // namespace rules

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

std::shared_ptr<const domain::Decomposition> DomainPlacement::scaled_grid(const rules::Grid& grid, std::int64_t lat_num,
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
  rules::Builder build;
  const rules::NodeView view{*this, node, op, inputs, layouts};
  agree_on_success(comm().mpi_comm(), [&] { build = rules::decide(view); });
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
