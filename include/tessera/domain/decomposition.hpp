#pragma once
// Decomposition: a global grid, (leading dims..., lat, lon) in C order, split over a
// domain communicator.
//
// ML fields, (B, C, lat, lon), are split along latitude only (a 1 x P process grid is
// written {P, 1}); climate fields, (levels..., lat, lon), may be split on a 2-D process
// grid {P_lat, P_lon}. Only the last two dims are split; leading dims are whole on every
// rank.
//
// Which rank owns which box, three ways (a climate code keeps its own):
//   - tessera's rule (the constructors): domain rank r sits at grid position
//     (r / P_lon, r % P_lon), longitude innermost, the row-major convention the mesh
//     uses, and extents follow shard_range, so 721 latitudes over 4 ranks give
//     181, 180, 180, 180 (SplitRule::last_rank: 180, 180, 180, 181, with_split);
//   - the code's Cartesian communicator (from_cartesian): the grid, every rank's
//     position and the periodicity read from MPI_Cart_get / MPI_Cart_coords, with
//     either dimension order;
//   - the code's own boxes (from_boxes): each rank passes the box it owns; tessera
//     gathers them, checks that they tile the grid without gap or overlap as a block
//     layout (the boxes of one process-grid row share their latitudes, those of one
//     column their longitudes, as every Cartesian decomposition does), and derives
//     every neighbour from the boxes, not from rank arithmetic.
// The old constructors refuse a 2-D Cartesian communicator whose rank order they would
// misread (dims (lon, lat) of equal extents): see the constructor.
//
// The object is a plan of pure arithmetic: every rank knows every rank's box, so
// planning halo messages needs no communication. The constructor is collective only to
// check that every rank passed the same grid (so a mismatch throws the same error
// everywhere instead of deadlocking a later exchange).
//
// Staggered fields (an Arakawa C-grid) are decomposed by the same process grid:
// staggered() gives the decomposition of the fields on one kind of cell face, whose
// boxes, shapes, scatter and gather (and HaloExchange plans) follow from the cells':
//   lon_face  u on the east faces: face j is the east face of cell j, nlon faces, the
//             rank owning the cell owns its east face (boxes as the cells').
//   lat_face  v on the faces between latitude rows, each owned by the rank owning the
//             row just south of it (the higher row index; row 0 is north):
//             LatitudeRows::cells      rows are cells bounded by the poles: nlat + 1
//                                      faces, face i the north face of row i, faces 0
//                                      and nlat on the poles (the southern band owns
//                                      the south pole face: one row more);
//             LatitudeRows::pole_points the first and last rows are the pole points:
//                                      nlat - 1 faces, face i between rows i and i + 1
//                                      (the northern band has one face fewer than rows).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"

namespace tessera {
class Mesh;
}

namespace tessera::domain {

// Process grid: P_lat x P_lon ranks, P_lat * P_lon = domain communicator size.
struct ProcessGrid {
  int lat = 1;
  int lon = 1;
  bool operator==(const ProcessGrid&) const = default;
  std::string str() const;  // "2x2"
  // Each extent named, for messages a caller of either language reads the same way
  // (Fortran passes grids lon first): "2 (lat) x 1 (lon)".
  std::string labelled_str() const;
};

struct GridCoords {
  int lat = 0;
  int lon = 0;
  bool operator==(const GridCoords&) const = default;
};

// The part of the (lat, lon) plane one rank owns, in global indices.
struct LocalBox {
  ShardRange lat;
  ShardRange lon;
  bool operator==(const LocalBox&) const = default;
  std::string str() const;  // "lat [0, 181) x lon [0, 1440)"
};

// Where a field's values sit: cell centres, or one kind of cell face (see above).
enum class Stagger { none, lon_face, lat_face };
// "none" "lon_face" "lat_face"
std::string_view stagger_name(Stagger stagger) noexcept;
// What the first and last latitude rows are (it decides the latitude faces).
enum class LatitudeRows { cells, pole_points };

// How an uneven split places its remainder along one axis of the process grid.
enum class SplitRule {
  first_ranks,  // the first n % P blocks hold one row more (shard_range): 10 over 4 -> 3, 3, 2, 2
  last_rank,    // every block holds n / P, the last the remainder too: 10 over 4 -> 2, 2, 2, 4
};
// "first_ranks" "last_rank"
std::string_view split_rule_name(SplitRule rule) noexcept;
// The extents of `parts` blocks of `global` cells under `rule`: parts + 1 boundaries.
std::vector<std::int64_t> split_bounds(std::int64_t global, int parts, SplitRule rule);

// Which dimension of a 2-D Cartesian communicator runs along latitude: lat_lon, dims
// (P_lat, P_lon) (tessera's own row-major order); lon_lat, dims (P_lon, P_lat) (a
// Fortran code's (i, j) order, latitude the fastest-varying rank).
enum class CartesianOrder { lat_lon, lon_lat };
// "lat_lon" "lon_lat"
std::string_view cartesian_order_name(CartesianOrder order) noexcept;

// The process grid for `ranks` ranks over an nlat x nlon plane that gives each rank the
// shortest box boundary (the halo a rank exchanges: local lat + local lon extents, by the
// partition rule), like MPI_Dims_create but aware of the grid's aspect; among equals,
// more ranks along latitude. InvalidArgument when no grid gives every rank a cell.
ProcessGrid auto_process_grid(int ranks, std::int64_t nlat, std::int64_t nlon);

class Decomposition {
 public:
  // 1-D along latitude: grid {comm.size(), 1}. `global_shape` has at least two dims,
  // the last two being (lat, lon). Collective over `comm`. Throws InvalidArgument when a
  // rank would own no latitude (or longitude), naming the rank and the extents.
  Decomposition(Communicator& comm, Shape global_shape);
  // On a 2-D process grid; grid.lat * grid.lon must equal comm.size().
  Decomposition(Communicator& comm, Shape global_shape, ProcessGrid grid);
  // Over the mesh's domain communicator (the mesh must outlive the decomposition):
  // 1-D along latitude, or on `grid`.
  Decomposition(const Mesh& mesh, Shape global_shape);
  Decomposition(const Mesh& mesh, Shape global_shape, ProcessGrid grid);
  // The constructors above place rank r at (r / P_lon, r % P_lon). Handed a 2-D
  // Cartesian communicator, they adopt its coordinates when its dims say which is which
  // (dims (P_lat, P_lon), or (P_lon, P_lat) with P_lat != P_lon, or one of them 1) and
  // throw InvalidArgument naming both orders when they cannot tell (P_lat = P_lon > 1):
  // use from_cartesian then.

  // tessera's rank order with the remainder placed by `rule`. Collective.
  static Decomposition with_split(Communicator& comm, Shape global_shape, ProcessGrid grid, SplitRule rule);
  // The grid, every rank's position and the periodicity of a 2-D Cartesian
  // communicator (MPI_Cart_create), dimension order `order`, extents by `rule`.
  // Collective. InvalidArgument when `comm` has no 2-D Cartesian topology.
  static Decomposition from_cartesian(Communicator& comm, Shape global_shape, CartesianOrder order,
                                      SplitRule rule = SplitRule::first_ranks);
  // Every rank's own box (global first indices and extents). Collective: gathers the
  // boxes and throws the same InvalidArgument on every rank, naming the ranks and
  // boxes, when one is empty or leaves the grid, two overlap, a cell is owned by no
  // rank, or the boxes are not a block layout (see the top).
  static Decomposition from_boxes(Communicator& comm, Shape global_shape, const LocalBox& mine);

  // Collective: throws the same InvalidArgument on every rank unless every rank's
  // `expected` is its box, naming the first rank (in rank order) whose box differs and
  // both boxes. The one call a caller makes to check that tessera and the code agree.
  void check_box(const LocalBox& expected) const;

  // The periodicity of a Cartesian communicator (from_cartesian), or nullopt (unknown:
  // the other constructors). A halo exchange refuses an edge policy that contradicts it.
  std::optional<bool> periodic_lat() const;
  std::optional<bool> periodic_lon() const;
  // How the boxes were given: "row-major", "row-major, last_rank remainder",
  // "Cartesian (lon, lat)", "caller's boxes".
  const std::string& layout_name() const;

  // Private to the implementation (decomposition.cpp): the blocks of each axis and the
  // rank at each grid position.
  struct Layout;

  // The decomposition of the fields on `stagger` faces of this grid (of its cells for
  // Stagger::none), by the same process grid; `rows` matters for lat_face only. Pure
  // arithmetic, not collective. Throws InvalidArgument for a pole-point grid of fewer
  // than 2 latitudes (no face between rows). A rank may own no lat_face (a polar band of
  // one pole-point row).
  Decomposition staggered(Stagger stagger, LatitudeRows rows = LatitudeRows::cells) const;
  Stagger stagger() const { return stagger_; }
  LatitudeRows latitude_rows() const { return rows_; }

  Communicator& comm() const { return *comm_; }
  int rank() const { return rank_; }
  int size() const { return grid_.lat * grid_.lon; }
  const ProcessGrid& grid() const { return grid_; }

  // The field's global shape: (leading..., faces or cells along lat, along lon).
  const Shape& global_shape() const { return global_shape_; }
  std::int64_t global_lat() const { return global_shape_[global_shape_.size() - 2]; }
  std::int64_t global_lon() const { return global_shape_.back(); }
  // The leading dims (everything before lat, lon).
  Shape leading_shape() const { return Shape(global_shape_.begin(), global_shape_.end() - 2); }

  GridCoords coords() const { return coords_of(rank_); }
  GridCoords coords_of(int rank) const;
  int rank_of(GridCoords coords) const;

  // Extents of a process-grid row / column (shard_range of the cells; the faces of a
  // staggered decomposition follow from them).
  ShardRange lat_range(int grid_lat) const;
  ShardRange lon_range(int grid_lon) const;
  // The process-grid row / column owning global latitude (longitude) index `i` of the
  // field, in [0, global_lat()) ([0, global_lon())).
  int lat_block_of(std::int64_t i) const;
  int lon_block_of(std::int64_t i) const;
  LocalBox box() const { return box_of(rank_); }
  LocalBox box_of(int rank) const;
  // Leading dims + this rank's (lat, lon) extents.
  Shape local_shape() const { return local_shape(leading_shape()); }
  Shape local_shape(const Shape& leading) const;

  // Root holds `global` (leading..., lat, lon); every rank receives its box into
  // `local` (any strides; its leading dims decide the leading dims, and root's `global`
  // must have the same). Collective; a shape error on any rank throws everywhere.
  void scatter(const Tensor& global, Tensor& local, int root = 0) const;
  // Convenience: allocates the contiguous local tensor (leading dims from the
  // decomposition's global shape).
  Tensor scatter(const Tensor& global, DType dtype, int root = 0) const;
  // Every rank's `local` box lands in root's `global` (other ranks may pass an
  // undefined `global`). Collective.
  void gather(const Tensor& local, Tensor& global, int root = 0) const;
  // Convenience: returns the gathered contiguous global field on root, an undefined
  // tensor elsewhere.
  Tensor gather(const Tensor& local, int root = 0) const;

  // "[2, 721, 1440] over 2x2 (rank 3: lat [361, 721) x lon [720, 1440))", with
  // " lat_face" (and " pole-point rows") after the shape when staggered.
  std::string str() const;

 private:
  Decomposition(Communicator& comm, Shape global_shape, std::shared_ptr<const Layout> layout);
  void validate();
  std::string str_of_args() const;

  Communicator* comm_ = nullptr;
  std::shared_ptr<const Layout> layout_;
  int rank_ = 0;
  ProcessGrid grid_;
  Shape global_shape_;
  std::int64_t cell_lat_ = 0;  // latitude rows of the cells (global_lat() counts faces for lat_face)
  Stagger stagger_ = Stagger::none;
  LatitudeRows rows_ = LatitudeRows::cells;
};

}  // namespace tessera::domain
