#pragma once
// Where a value of an imported graph lives when the graph runs domain-parallel
// (docs/onnx.md, "Domain-parallel execution"): the layout the placement pass
// (domain_placement.hpp) gives every value, node by node, from the layouts of its inputs.
//
//   whole     the same full value on every rank: parameters, constants, shapes of
//             whole values, what a global reduction returns.
//   per_rank  an integer value that differs between ranks because it was read off a
//             split value (Shape of the local block): it may size or reshape split
//             values, never enter floating arithmetic.
//   split     this rank's block of a field: axes lat_axis and lon_axis (lon_axis -1 for
//             a field split along one axis, the columns of a column model) hold the
//             rows and columns of `grid`'s box of this rank; every other axis is whole.
//   padded    a split value with padding still to come (Pad, or a periodic wrap written
//             as Slice + Concat): the tensor is the unpadded block, `pads` says how wide
//             and what fills each edge. Only a Conv or a pool reads it, as its halo.
//   edge_slice  the first or last `width` rows/columns of a split value along one split
//             axis (a Slice the wrap pattern reads); the tensor is the whole block.
//   flat      a split value whose axes from `flat_axis` on were merged into one (the
//             Reshape GroupNorm exports around InstanceNormalization); `merged` is the
//             local shape of the merged axes, and `restores` the split layout a Reshape
//             back to them returns to.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/domain/decomposition.hpp"

namespace tessera::onnx {

// What fills padding beyond the global field's edge.
enum class EdgeFill : std::uint8_t { zero, periodic, replicate, reflect, lowest };

struct EdgePadding {
  std::int64_t width = 0;
  EdgeFill fill = EdgeFill::zero;
};

struct Layout {
  enum class Kind : std::uint8_t { whole, per_rank, split, padded, edge_slice, flat };
  Kind kind = Kind::whole;
  int lat_axis = -1, lon_axis = -1;
  // The field's global grid for this value (its global lat, lon extents) and this
  // rank's box of it: the caller's decomposition, or one scaled from it by a stride,
  // a pool or an upsampling.
  std::shared_ptr<const domain::Decomposition> grid;
  // padded: per edge, in the order lat before, lat after, lon before, lon after.
  std::array<EdgePadding, 4> pads{};
  // edge_slice: the split axis sliced (its position), which end, how wide.
  int slice_axis = -1;
  bool slice_last = false;
  std::int64_t slice_width = 0;
  std::string slice_source;  // the value sliced
  // flat
  int flat_axis = -1;
  Shape merged;
  std::shared_ptr<const Layout> restores;

  bool is_whole() const { return kind == Kind::whole; }
  bool is_split_family() const { return kind != Kind::whole && kind != Kind::per_rank; }
  bool splits(int axis) const { return axis >= 0 && (axis == lat_axis || axis == lon_axis); }
  bool has_pads() const {
    for (const EdgePadding& p : pads) {
      if (p.width != 0) return true;
    }
    return false;
  }
  std::string str() const;  // "split (lat axis 2, lon axis 3) of 360 x 720"

  static Layout whole() { return {}; }
  static Layout per_rank() {
    Layout l;
    l.kind = Kind::per_rank;
    return l;
  }
  static Layout split(int lat_axis, int lon_axis, std::shared_ptr<const domain::Decomposition> grid) {
    Layout l;
    l.kind = Kind::split;
    l.lat_axis = lat_axis;
    l.lon_axis = lon_axis;
    l.grid = std::move(grid);
    return l;
  }
  // The same split value seen after its axes moved: axis a of the input is axis map(a).
  template <class Map>
  Layout moved(Map map) const {
    Layout l = *this;
    l.lat_axis = lat_axis < 0 ? -1 : map(lat_axis);
    l.lon_axis = lon_axis < 0 ? -1 : map(lon_axis);
    return l;
  }
};

}  // namespace tessera::onnx
