#pragma once
// The rules of the placement pass (domain_placement.hpp), one family per file: what one
// node that reads a split value becomes (domain_ops.hpp), or its refusal.
//
//   domain_rules_local.cpp   ops that run on the block as they are, because they mix no
//                            elements across the split axes: elementwise, BatchNorm, the
//                            shape ops on unsplit axes, Reshape to and from GroupNorm's
//                            merged layout, softmax/LayerNorm/MatMul/Gemm over unsplit axes
//   domain_rules_halo.cpp    windows (Conv, pools, linear Resize) and the padding they
//                            read: Pad and a periodic wrap, passed on as a layout
//   domain_rules_global.cpp  reductions and normalisations over the split axes: sums over
//                            the ranks
//
// A rule decides and checks only; what it returns builds the op (collectively: halo
// plans, scaled grids) once every rank agreed on the decision. NodeView is what a rule
// sees of the node; it outlives the builder.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "onnx/domain_layout.hpp"
#include "onnx/domain_ops.hpp"
#include "onnx/domain_placement.hpp"
#include "onnx/op.hpp"

namespace tessera::onnx::rules {

using Builder = std::function<std::unique_ptr<Op>()>;
using Grid = std::shared_ptr<const domain::Decomposition>;

struct NodeView {
  DomainPlacement& placement;
  const NodeSpec& node;
  std::unique_ptr<Op>& op;  // the node's own op, moved into what the builder makes
  const std::vector<Value>& in;
  const std::vector<Layout>& layouts;

  const Layout& x() const { return layouts[0]; }
  std::int64_t rank_of(std::size_t i) const { return static_cast<std::int64_t>(in[i].shape().size()); }
  // The node's own op, unchanged (its outputs then vary per rank: Shape of a block).
  Builder keep() const;
  // The node's own op on the block, its outputs laid out as `outputs` says.
  Builder local(std::vector<Layout> outputs) const;
  std::vector<Layout> same_for_outputs(const Layout& l) const { return std::vector<Layout>(node.outputs.size(), l); }
  // Refusals naming the input: inputs from `from` on must be whole; X must be split.
  void require_whole(std::size_t from) const;
  const Layout& require_split_x() const;
};

// UnsupportedError "<node> cannot run domain-parallel: <why>".
[[noreturn]] void refuse(const NodeSpec& node, const std::string& why);
int normalized_axis(const NodeSpec& node, std::int64_t axis, std::int64_t rank);
// The ops that act element by element (the unary family, arithmetic, Where, Cast, ...).
const std::set<std::string>& pointwise_ops();
// The ints of an attribute, or of input `index` when the opset moved it there.
std::vector<std::int64_t> ints_from(const NodeSpec& node, const std::vector<Value>& inputs, std::size_t index,
                                    const std::string& attribute);
// The first split-family layout among `layouts` (nullptr: none).
const Layout* first_split(const std::vector<Layout>& layouts);
// Two split values live on the same blocks.
bool same_split(const Layout& a, const Layout& b);
LocalOp::LayoutRule fixed(std::vector<Layout> layouts);

// domain_rules_local.cpp
Builder pointwise(const NodeView& v);
Builder batch_norm(const NodeView& v);
Builder concat(const NodeView& v);
Builder split_op(const NodeView& v);
Builder transpose(const NodeView& v);
Builder reshape(const NodeView& v);
Builder squeeze(const NodeView& v);
Builder layer_norm(const NodeView& v);
Builder softmax(const NodeView& v);
Builder matmul(const NodeView& v);
Builder gemm(const NodeView& v);
Builder gather(const NodeView& v);

// domain_rules_halo.cpp
Builder halo_window(const NodeView& v);
Builder conv_transpose(const NodeView& v);
Builder resize(const NodeView& v);
Builder wrap(const NodeView& v, int axis);
Builder slice(const NodeView& v);
Builder pad(const NodeView& v);

// domain_rules_global.cpp
Builder global_average(const NodeView& v);
Builder reduce(const NodeView& v);
Builder instance_norm(const NodeView& v);

}  // namespace tessera::onnx::rules
