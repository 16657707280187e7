#pragma once
// SplitHalo: the halo a Conv, a pool or a linear Resize of an imported graph reads
// around this rank's block of a split field (domain_layout.hpp), planned once per node.
//
// Inside the global field the halo comes from the neighbours (domain::HaloExchange; a
// periodic axis wraps there too). Beyond the field's edges it is what the graph's
// padding says (EdgeFill): zeros (Conv's pads, Pad's constant 0), the lowest value
// (MaxPool's pads, which never win), the edge row repeated (Pad's edge mode, the clamp
// of a linear Resize) or mirrored without the edge row (Pad's reflect mode). Those edge
// fills are done here, on the ranks at the edge, after the exchange: longitude edges over
// every row first, then latitude edges over the full width, which for these separable
// fills gives the corners numpy's and ONNX's axis-by-axis padding gives.
//
// unpad_adjoint is the transpose: the edge fills' adjoints in reverse order (a repeated
// or mirrored halo row adds into the row it copied), then the exchange's adjoint.

#include <array>
#include <memory>
#include <string>

#include "onnx/domain_layout.hpp"
#include "tessera/domain/halo_exchange.hpp"

namespace tessera::onnx {

class SplitHalo {
 public:
  // edges: lat before, lat after, lon before, lon after. A periodic fill must be on both
  // edges of its axis. Collective over grid's communicator. InvalidArgument naming
  // `where` when some rank's block is too small for the halo or a mirrored edge.
  SplitHalo(const domain::Decomposition& grid, const std::array<EdgePadding, 4>& edges, std::string where);
  ~SplitHalo();

  // block [..., lat, lon] (this rank's box) -> [..., before + lat + after, before + lon + after].
  Tensor pad(const Tensor& block);
  // The gradient of the padded block -> the gradient of the block.
  Tensor unpad_adjoint(Tensor grad_padded);

  const std::array<EdgePadding, 4>& edges() const { return edges_; }

 private:
  void fill_edge(Tensor& padded, int edge) const;
  void fill_edge_adjoint(Tensor& grad, int edge) const;
  bool at_global_edge(int edge) const;

  std::array<EdgePadding, 4> edges_;
  std::string where_;
  domain::LocalBox box_;
  std::int64_t global_lat_ = 0, global_lon_ = 0;
  std::unique_ptr<domain::HaloExchange> exchange_;
};

}  // namespace tessera::onnx
