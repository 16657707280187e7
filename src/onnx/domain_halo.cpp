// The halo of a split field's Conv, pool or Resize, with the graph's edge fills (domain_halo.hpp).
#include "onnx/domain_halo.hpp"

#include <limits>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::onnx {
namespace {

enum Edge { lat_before = 0, lat_after = 1, lon_before = 2, lon_after = 3 };

domain::EdgePolicy exchange_policy(const EdgePadding& edge) {
  // Periodic edges wrap in the exchange; every other edge is filled here afterwards.
  return edge.fill == EdgeFill::periodic ? domain::EdgePolicy::periodic : domain::EdgePolicy::none;
}

// dst += src (views of one padded tensor, any strides).
void add_into(Tensor dst, const Tensor& src) {
  Tensor sum = dst.clone();
  ops::axpy(1.0, src.contiguous(), sum);
  dst.copy_from(sum);
}

void fill_lowest(Tensor view) {
  const auto n = static_cast<std::size_t>(view.numel());
  if (view.dtype() == DType::f32) {
    view.copy_from(Tensor::from_vector(std::vector<float>(n, -std::numeric_limits<float>::infinity()), view.shape()));
  } else {
    view.copy_from(Tensor::from_vector(std::vector<double>(n, -std::numeric_limits<double>::infinity()), view.shape()));
  }
}

}  // namespace

SplitHalo::SplitHalo(const domain::Decomposition& grid, const std::array<EdgePadding, 4>& edges, std::string where)
    : edges_(edges), where_(std::move(where)), box_(grid.box()), global_lat_(grid.global_lat()),
      global_lon_(grid.global_lon()) {
  for (int axis = 0; axis < 2; ++axis) {
    const bool before = edges_[2 * axis].fill == EdgeFill::periodic, after = edges_[2 * axis + 1].fill == EdgeFill::periodic;
    if (before != after) throw InternalError(where_ + ": a periodic halo on one edge of an axis only");
  }
  // A mirrored edge reads rows 1..width of the edge rank's own block.
  for (int rank = 0; rank < grid.size(); ++rank) {
    const domain::LocalBox box = grid.box_of(rank);
    for (int edge = 0; edge < 4; ++edge) {
      const EdgePadding& e = edges_[edge];
      const ShardRange& range = edge < 2 ? box.lat : box.lon;
      const std::int64_t global = edge < 2 ? global_lat_ : global_lon_;
      const bool at_edge = edge % 2 == 0 ? range.start == 0 : range.end() == global;
      if (at_edge && e.fill == EdgeFill::reflect && e.width >= range.length) {
        throw InvalidArgument(where_ + ": reflect padding of width " + std::to_string(e.width) + " needs " +
                              std::to_string(e.width + 1) + " rows or columns on domain rank " +
                              std::to_string(rank) + " at the field's edge, which holds " +
                              std::to_string(range.length));
      }
    }
  }
  domain::HaloSpec spec;
  spec.width = {static_cast<int>(edges_[lat_before].width), static_cast<int>(edges_[lat_after].width),
                static_cast<int>(edges_[lon_before].width), static_cast<int>(edges_[lon_after].width)};
  spec.periodic_lon = edges_[lon_before].fill == EdgeFill::periodic;
  spec.north = exchange_policy(edges_[lat_before]);
  spec.south = exchange_policy(edges_[lat_after]);
  spec.west = exchange_policy(edges_[lon_before]);
  spec.east = exchange_policy(edges_[lon_after]);
  try {
    exchange_ = std::make_unique<domain::HaloExchange>(grid, spec);
  } catch (const Error& e) {
    throw InvalidArgument(where_ + " cannot run split: " + e.what());
  }
}

SplitHalo::~SplitHalo() = default;

bool SplitHalo::at_global_edge(int edge) const {
  switch (edge) {
    case lat_before: return box_.lat.start == 0;
    case lat_after: return box_.lat.end() == global_lat_;
    case lon_before: return box_.lon.start == 0;
    default: return box_.lon.end() == global_lon_;
  }
}

// The halo rows (columns) beyond one global edge, from the padded block's own rows.
void SplitHalo::fill_edge(Tensor& padded, int edge) const {
  const EdgePadding& e = edges_[edge];
  if (e.width == 0 || e.fill == EdgeFill::periodic || !at_global_edge(edge)) return;
  const int dim = padded.dim() - (edge < 2 ? 2 : 1);
  const std::int64_t before = edges_[edge < 2 ? lat_before : lon_before].width;
  const std::int64_t length = edge < 2 ? box_.lat.length : box_.lon.length;
  const bool low = edge % 2 == 0;
  for (std::int64_t k = 1; k <= e.width; ++k) {  // k-th row beyond the edge
    Tensor halo = padded.narrow(dim, low ? before - k : before + length - 1 + k, 1);
    switch (e.fill) {
      case EdgeFill::zero: halo.fill_zero(); break;
      case EdgeFill::lowest: fill_lowest(halo); break;
      case EdgeFill::replicate: halo.copy_from(padded.narrow(dim, low ? before : before + length - 1, 1)); break;
      case EdgeFill::reflect: halo.copy_from(padded.narrow(dim, low ? before + k : before + length - 1 - k, 1)); break;
      case EdgeFill::periodic: break;
    }
  }
}

void SplitHalo::fill_edge_adjoint(Tensor& grad, int edge) const {
  const EdgePadding& e = edges_[edge];
  if (e.width == 0 || e.fill == EdgeFill::periodic || !at_global_edge(edge)) return;
  const int dim = grad.dim() - (edge < 2 ? 2 : 1);
  const std::int64_t before = edges_[edge < 2 ? lat_before : lon_before].width;
  const std::int64_t length = edge < 2 ? box_.lat.length : box_.lon.length;
  const bool low = edge % 2 == 0;
  for (std::int64_t k = 1; k <= e.width; ++k) {
    Tensor halo = grad.narrow(dim, low ? before - k : before + length - 1 + k, 1);
    if (e.fill == EdgeFill::replicate) add_into(grad.narrow(dim, low ? before : before + length - 1, 1), halo);
    if (e.fill == EdgeFill::reflect) add_into(grad.narrow(dim, low ? before + k : before + length - 1 - k, 1), halo);
    halo.fill_zero();
  }
}

Tensor SplitHalo::pad(const Tensor& block) {
  const Shape leading(block.shape().begin(), block.shape().end() - 2);
  // Not zero-filled: every halo cell is written below (by the exchange, or by an edge
  // fill on the ranks at the field's edge), and the interior by the copy.
  Tensor padded = Tensor::empty(exchange_->padded_shape(leading), block.dtype());
  exchange_->interior(padded).copy_from(block);
  exchange_->exchange(padded);
  for (int edge : {lon_before, lon_after, lat_before, lat_after}) fill_edge(padded, edge);
  return padded;
}

Tensor SplitHalo::unpad_adjoint(Tensor grad_padded) {
  for (int edge : {lat_after, lat_before, lon_after, lon_before}) fill_edge_adjoint(grad_padded, edge);
  exchange_->exchange_adjoint(grad_padded);
  return exchange_->interior(grad_padded).contiguous();
}

}  // namespace tessera::onnx
