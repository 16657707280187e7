#pragma once
// DomainPlacement: runs an imported graph on a field split over a decomposition, the
// way the code that calls it splits its grid (docs/onnx.md, "Domain-parallel execution").
//
// Each graph input named in `inputs` is this rank's block of a field: its lat and lon
// axes hold the decomposition's box of this rank. The executor asks place() for every
// node, in order, on the first forward, with the layouts (domain_layout.hpp) of the
// node's inputs; place() returns the op that computes the node on this rank's part:
//
//   - the node's own op when every input is whole (it runs the same on every rank);
//   - LocalOp when the op does not mix elements across the split axes (elementwise,
//     channel mixing, a 2x2 MaxPool on even blocks, nearest upsampling, Concat of
//     channels, a Reshape that merges the split axes for GroupNorm and back);
//   - HaloOp for Conv, MaxPool, AveragePool and linear Resize: the halo the op reads
//     beyond the block, from the neighbours and, beyond the field's edge, the fill its
//     padding means (Conv's pads, a preceding Pad or periodic wrap);
//   - GlobalSumOp / SplitInstanceNormOp for reductions and normalisations over the
//     split axes;
//   - PassOp for Pad and the Slice + Concat of a periodic wrap, whose padding the next
//     Conv or pool takes over as its halo.
//
// Anything else that reads a split value is refused: UnsupportedError "<node> cannot run
// domain-parallel: <why>", never a silently different answer. The decision is agreed
// over the ranks before any rank plans a halo, so every rank throws the same error.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnx/domain_layout.hpp"
#include "onnx/graph.hpp"
#include "onnx/op.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace tessera::onnx {

class DomainPlacement {
 public:
  // `decomposition` must outlive the placement. InvalidArgument naming the input when
  // its shape does not hold the decomposition's global extents along the axes.
  DomainPlacement(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs,
                  const std::vector<GraphValue>& graph_inputs, const OpRegistry& registry);

  // The layout and this rank's shape of graph input `index`.
  const Layout& input_layout(std::size_t index) const { return input_layouts_.at(index); }
  const Shape& local_input_shape(std::size_t index) const { return local_shapes_.at(index); }

  // The op that runs `node` on this rank's part (`op` itself, moved out, when nothing is
  // split). Collective over the decomposition's ranks. On a refusal `op` is untouched.
  std::unique_ptr<Op> place(const NodeSpec& node, std::unique_ptr<Op>& op, const std::vector<Value>& inputs,
                            const std::vector<Layout>& layouts);
  // How a placed op runs: "whole (the same on every rank)", "local on the block", "halo
  // lat 1+1, lon 1+1", "sum over ranks", ...
  static std::string describe(const Op& op);
  // The layouts of the node's outputs after its forward.
  std::vector<Layout> output_layouts(const Op& op, const std::vector<Layout>& inputs, std::size_t outputs) const;

  // The grid of a split value scaled by num/den along (lat, lon): a stride divides, an
  // upsampling multiplies. Collective the first time a grid is asked for.
  std::shared_ptr<const domain::Decomposition> scaled_grid(const std::shared_ptr<const domain::Decomposition>& grid,
                                                           std::int64_t lat_num, std::int64_t lat_den,
                                                           std::int64_t lon_num, std::int64_t lon_den);
  // Whether every rank's box of `grid` divides by `lat` and `lon` (a stride's blocks).
  static bool blocks_divide(const domain::Decomposition& grid, std::int64_t lat, std::int64_t lon);

  Communicator& comm() const { return decomposition_->comm(); }
  const OpRegistry& registry() const { return *registry_; }

 private:
  const domain::Decomposition* decomposition_;
  const OpRegistry* registry_;
  std::shared_ptr<const domain::Decomposition> base_;
  std::map<std::string, std::shared_ptr<const domain::Decomposition>> grids_;  // by "lat x lon"
  std::vector<Layout> input_layouts_;
  std::vector<Shape> local_shapes_;
};

}  // namespace tessera::onnx
