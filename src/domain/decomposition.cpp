// Decomposition: the arithmetic of who owns which (lat, lon) box, and scatter/gather of
// whole fields through one MPI_Scatterv / MPI_Gatherv.

#include "tessera/domain/decomposition.hpp"

#include "domain/decomposition_layout.hpp"

#include <algorithm>
#include <climits>
#include <tuple>
#include <utility>

#include "comm/mpi_types.hpp"
#include "comm/request_state.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/mesh.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::domain {

constexpr tessera::detail::EnumName<Stagger> kStaggerNames[] = {
    {Stagger::none, "none"},
    {Stagger::lon_face, "lon_face"},
    {Stagger::lat_face, "lat_face"},
};

std::string_view stagger_name(Stagger stagger) noexcept { return tessera::detail::name_of(kStaggerNames, stagger); }

std::string ProcessGrid::str() const { return std::to_string(lat) + "x" + std::to_string(lon); }
std::string ProcessGrid::labelled_str() const {
  return std::to_string(lat) + " (lat) x " + std::to_string(lon) + " (lon)";
}

ProcessGrid auto_process_grid(int ranks, std::int64_t nlat, std::int64_t nlon) {
  if (ranks < 1) throw InvalidArgument("auto_process_grid: " + std::to_string(ranks) + " ranks");
  if (nlat < 1 || nlon < 1) {
    throw InvalidArgument("auto_process_grid: a " + std::to_string(nlat) + " x " + std::to_string(nlon) + " grid");
  }
  ProcessGrid best{0, 0};
  std::int64_t best_boundary = 0;
  for (int plat = ranks; plat >= 1; --plat) {  // latitude-major first: it wins ties
    if (ranks % plat != 0) continue;
    const int plon = ranks / plat;
    if (plat > nlat || plon > nlon) continue;  // some rank would own nothing
    // The largest box (the first blocks of the partition rule hold one more).
    const std::int64_t boundary = (nlat + plat - 1) / plat + (nlon + plon - 1) / plon;
    if (best.lat == 0 || boundary < best_boundary) {
      best = {plat, plon};
      best_boundary = boundary;
    }
  }
  if (best.lat == 0) {
    throw InvalidArgument("auto_process_grid: no process grid of " + std::to_string(ranks) + " ranks gives every rank a cell of a " +
                          std::to_string(nlat) + " x " + std::to_string(nlon) + " grid");
  }
  return best;
}

std::string LocalBox::str() const {
  return "lat [" + std::to_string(lat.start) + ", " + std::to_string(lat.end()) + ") x lon [" +
         std::to_string(lon.start) + ", " + std::to_string(lon.end()) + ")";
}

constexpr tessera::detail::EnumName<SplitRule> kSplitRuleNames[] = {
    {SplitRule::first_ranks, "first_ranks"},
    {SplitRule::last_rank, "last_rank"},
};

std::string_view split_rule_name(SplitRule rule) noexcept { return tessera::detail::name_of(kSplitRuleNames, rule); }

constexpr tessera::detail::EnumName<CartesianOrder> kCartesianOrderNames[] = {
    {CartesianOrder::lat_lon, "lat_lon"},
    {CartesianOrder::lon_lat, "lon_lat"},
};

std::string_view cartesian_order_name(CartesianOrder order) noexcept {
  return tessera::detail::name_of(kCartesianOrderNames, order);
}

std::vector<std::int64_t> split_bounds(std::int64_t global, int parts, SplitRule rule) {
  if (parts < 1 || global < 0) {
    throw InvalidArgument("split_bounds: " + std::to_string(global) + " cells over " + std::to_string(parts) + " parts");
  }
  std::vector<std::int64_t> bounds(static_cast<std::size_t>(parts) + 1, 0);
  const std::int64_t base = global / parts;
  for (int p = 0; p < parts; ++p) {
    bounds[p + 1] = rule == SplitRule::first_ranks ? shard_range(global, parts, p).end() : bounds[p] + base;
  }
  bounds[parts] = global;  // last_rank: the remainder on the last block
  return bounds;
}


namespace {

using Layout = std::shared_ptr<const Decomposition::Layout>;

// The dims and the grid labelled: a Fortran caller declares (lon, lat, ...) and passes
// its grid lon first, so bare "[10, 13] over 11x1" would read backwards to it.
std::string described(const Shape& shape, const ProcessGrid& grid) {
  return "Decomposition of " + shape_str(shape) + " (lat, lon last) over a " + grid.labelled_str() + " process grid";
}

// The argument checks every constructor shares, before any block is computed.
void check_shape_and_grid(const Shape& shape, const ProcessGrid& grid, int comm_size) {
  const std::string what = described(shape, grid);
  if (shape.size() < 2) throw InvalidArgument(what + ": the global shape needs at least the two dims (lat, lon)");
  for (std::int64_t e : shape) {
    if (e < 0) throw InvalidArgument(what + ": negative extent");
  }
  // The product of the extents must be countable (a C or Fortran caller's shape can be
  // anything): ShapeError naming the shape otherwise.
  (void)tessera::detail::checked_numel(shape, what);
  // lat * lon in int overflowed (undefined behaviour) for a grid no launch can have.
  const auto ranks = tessera::detail::try_mul(grid.lat, grid.lon);
  if (grid.lat < 1 || grid.lon < 1 || !ranks || *ranks != comm_size) {
    throw InvalidArgument(what + ": the process grid must hold exactly the " + std::to_string(comm_size) +
                          " ranks of the domain communicator");
  }
}

// tessera's own rank order: r at (r / P_lon, r % P_lon).
std::vector<GridCoords> row_major(const ProcessGrid& grid) {
  std::vector<GridCoords> coords;
  for (int r = 0; r < grid.lat * grid.lon; ++r) coords.push_back({r / grid.lon, r % grid.lon});
  return coords;
}

Layout split_layout(const Shape& shape, const ProcessGrid& grid, SplitRule rule, std::vector<GridCoords> coords,
                    std::string name) {
  auto layout = std::make_shared<Decomposition::Layout>();
  layout->lat = split_bounds(shape[shape.size() - 2], grid.lat, rule);
  layout->lon = split_bounds(shape.back(), grid.lon, rule);
  layout->coords = std::move(coords);
  layout->name = std::move(name);
  if (rule != SplitRule::first_ranks) layout->name += ", " + std::string(split_rule_name(rule)) + " remainder";
  layout->index_ranks();
  return layout;
}

// A 2-D Cartesian topology: dims and periods in the communicator's own order.
struct Cartesian {
  int dims[2] = {0, 0};
  int periods[2] = {0, 0};
};

std::optional<Cartesian> cartesian_of(MPI_Comm comm) {
  int topology = MPI_UNDEFINED;
  TESSERA_CHECK_MPI(MPI_Topo_test(comm, &topology));
  if (topology != MPI_CART) return std::nullopt;
  int ndims = 0;
  TESSERA_CHECK_MPI(MPI_Cartdim_get(comm, &ndims));
  if (ndims != 2) return std::nullopt;
  Cartesian c;
  int coords[2];
  TESSERA_CHECK_MPI(MPI_Cart_get(comm, 2, c.dims, c.periods, coords));
  return c;
}

// Every rank's grid position, read from the Cartesian communicator.
Layout cartesian_layout(MPI_Comm comm, const Shape& shape, const Cartesian& cart, CartesianOrder order,
                        SplitRule rule, bool take_periodicity) {
  const int lat_dim = order == CartesianOrder::lat_lon ? 0 : 1;
  const ProcessGrid grid{cart.dims[lat_dim], cart.dims[1 - lat_dim]};
  std::vector<GridCoords> coords;
  for (int r = 0; r < grid.lat * grid.lon; ++r) {
    int c[2];
    TESSERA_CHECK_MPI(MPI_Cart_coords(comm, r, 2, c));
    coords.push_back({c[lat_dim], c[1 - lat_dim]});
  }
  Layout layout = split_layout(shape, grid, rule, std::move(coords),
                               order == CartesianOrder::lat_lon ? "Cartesian (lat, lon)" : "Cartesian (lon, lat)");
  if (!take_periodicity) return layout;
  auto with = std::make_shared<Decomposition::Layout>(*layout);
  with->periodic_lat = cart.periods[lat_dim] != 0;
  with->periodic_lon = cart.periods[1 - lat_dim] != 0;
  return with;
}

// The old constructors' rank order for `comm`: row-major, unless `comm` is a 2-D
// Cartesian communicator whose dims say it is ordered (lon, lat); refused when they
// cannot say (equal extents), since misreading the order exchanges halos with the wrong
// neighbours and every block has the same extents (no check could catch it later).
Layout default_layout(Communicator& comm, const Shape& shape, const ProcessGrid& grid) {
  const std::optional<Cartesian> cart = cartesian_of(comm.mpi_comm());
  if (cart && (cart->dims[0] != grid.lat || cart->dims[1] != grid.lon || grid.lat == grid.lon) &&
      !(grid.lat == 1 || grid.lon == 1)) {
    if (cart->dims[0] == grid.lon && cart->dims[1] == grid.lat && grid.lat != grid.lon) {
      return cartesian_layout(comm.mpi_comm(), shape, *cart, CartesianOrder::lon_lat, SplitRule::first_ranks, false);
    }
    throw InvalidArgument(described(shape, grid) + ": the communicator is Cartesian with dims (" +
                          std::to_string(cart->dims[0]) + ", " + std::to_string(cart->dims[1]) +
                          "), and tessera cannot tell from the process grid whether they are ordered (lat, lon) "
                          "or (lon, lat); "
                          "a wrong guess exchanges halos with the wrong neighbours. Say which: "
                          "Decomposition::from_cartesian (C: tessera_decomp_create_cart, Fortran: "
                          "tessera_decomp_create_cart) with CartesianOrder lat_lon or lon_lat");
  }
  return split_layout(shape, grid, SplitRule::first_ranks, row_major(grid), "row-major");
}

}  // namespace

Decomposition::Decomposition(Communicator& comm, Shape global_shape)
    : Decomposition(comm, std::move(global_shape), ProcessGrid{comm.size(), 1}) {}

Decomposition::Decomposition(const Mesh& mesh, Shape global_shape)
    : Decomposition(mesh.domain(), std::move(global_shape)) {}

Decomposition::Decomposition(const Mesh& mesh, Shape global_shape, ProcessGrid grid)
    : Decomposition(mesh.domain(), std::move(global_shape), grid) {}

Decomposition::Decomposition(Communicator& comm, Shape global_shape, ProcessGrid grid)
    : Decomposition(comm, global_shape, (check_shape_and_grid(global_shape, grid, comm.size()),
                                         default_layout(comm, global_shape, grid))) {}

Decomposition Decomposition::with_split(Communicator& comm, Shape global_shape, ProcessGrid grid, SplitRule rule) {
  check_shape_and_grid(global_shape, grid, comm.size());
  return Decomposition(comm, global_shape, split_layout(global_shape, grid, rule, row_major(grid), "row-major"));
}

Decomposition Decomposition::from_cartesian(Communicator& comm, Shape global_shape, CartesianOrder order,
                                            SplitRule rule) {
  const std::optional<Cartesian> cart = cartesian_of(comm.mpi_comm());
  if (!cart) {
    throw InvalidArgument("Decomposition::from_cartesian of " + shape_str(global_shape) +
                          ": the communicator has no 2-D Cartesian topology (make it with MPI_Cart_create, or use "
                          "the constructor with a process grid)");
  }
  const int lat_dim = order == CartesianOrder::lat_lon ? 0 : 1;
  check_shape_and_grid(global_shape, {cart->dims[lat_dim], cart->dims[1 - lat_dim]}, comm.size());
  return Decomposition(comm, global_shape, cartesian_layout(comm.mpi_comm(), global_shape, *cart, order, rule, true));
}

Decomposition Decomposition::from_boxes(Communicator& comm, Shape global_shape, const LocalBox& mine) {
  // The shape is checked before the gather, identically everywhere (same arguments,
  // verified below), so a bad shape throws on every rank without a collective.
  check_shape_and_grid(global_shape, {comm.size(), 1}, comm.size());
  require_same_on_all_ranks(comm.mpi_comm(), shape_str(global_shape),
                            "Decomposition::from_boxes: the ranks passed different global shapes");
  return Decomposition(comm, global_shape, boxes_layout(all_boxes(comm, mine, "Decomposition::from_boxes"), global_shape));
}

Decomposition::Decomposition(Communicator& comm, Shape global_shape, std::shared_ptr<const Layout> layout)
    : comm_(&comm), layout_(std::move(layout)), rank_(comm.rank()), grid_(layout_->grid()),
      global_shape_(std::move(global_shape)) {
  validate();
  cell_lat_ = global_lat();
  // Everything above is local arithmetic on the arguments, so identical arguments give
  // identical verdicts; this one all-reduce makes sure the arguments were identical.
  require_same_on_all_ranks(comm.mpi_comm(), str_of_args(),
      "Decomposition: the ranks of the domain communicator passed different arguments");
}

std::string Decomposition::str_of_args() const {
  return shape_str(global_shape_) + " over " + grid_.str() + " " + layout_->name;
}

std::optional<bool> Decomposition::periodic_lat() const { return layout_->periodic_lat; }
std::optional<bool> Decomposition::periodic_lon() const { return layout_->periodic_lon; }
const std::string& Decomposition::layout_name() const { return layout_->name; }

void Decomposition::validate() {
  // A rank without cells would have nothing to send and break every neighbour relation;
  // report the first such rank (the same one on every rank).
  const std::string what = described(global_shape_, grid_);
  for (int q = 0; q < grid_.lat; ++q) {
    if (layout_->lat[q + 1] > layout_->lat[q]) continue;
    throw InvalidArgument(what + ": domain rank " + std::to_string(rank_of({q, 0})) + " would own 0 of the " +
                          std::to_string(global_lat()) + " latitudes (" + std::to_string(grid_.lat) +
                          " ranks along latitude)");
  }
  for (int c = 0; c < grid_.lon; ++c) {
    if (layout_->lon[c + 1] > layout_->lon[c]) continue;
    throw InvalidArgument(what + ": domain rank " + std::to_string(rank_of({0, c})) + " would own 0 of the " +
                          std::to_string(global_lon()) + " longitudes (" + std::to_string(grid_.lon) +
                          " ranks along longitude)");
  }
}

void Decomposition::check_box(const LocalBox& expected) const {
  const std::vector<LocalBox> boxes = all_boxes(*comm_, expected, "Decomposition::check_box");
  for (int r = 0; r < size(); ++r) {
    if (boxes[r] == box_of(r)) continue;
    throw InvalidArgument("Decomposition::check_box: domain rank " + std::to_string(r) + " expects to own " +
                          boxes[r].str() + ", but the decomposition (" + layout_->name + ") gives it " +
                          box_of(r).str() + " (the code and tessera disagree on the rank order or the split)");
  }
}

GridCoords Decomposition::coords_of(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw InvalidArgument("Decomposition: rank " + std::to_string(rank) + " is outside the " + grid_.str() +
                          " process grid");
  }
  return layout_->coords[rank];
}

int Decomposition::rank_of(GridCoords c) const {
  if (c.lat < 0 || c.lat >= grid_.lat || c.lon < 0 || c.lon >= grid_.lon) {
    throw InvalidArgument("Decomposition: grid position (" + std::to_string(c.lat) + ", " + std::to_string(c.lon) +
                          ") is outside the " + grid_.str() + " process grid");
  }
  return layout_->rank_at[static_cast<std::size_t>(c.lat) * grid_.lon + c.lon];
}

Decomposition Decomposition::staggered(Stagger stagger, LatitudeRows rows) const {
  Decomposition faces = *this;
  faces.stagger_ = stagger;
  faces.rows_ = rows;
  std::int64_t nlat = cell_lat_;
  if (stagger == Stagger::lat_face) {
    if (rows == LatitudeRows::pole_points && cell_lat_ < 2) {
      throw InvalidArgument("Decomposition of " + shape_str(global_shape_) + ": a pole-point grid of " +
                            std::to_string(cell_lat_) + " latitude(s) has no latitude face (faces lie between rows)");
    }
    nlat = rows == LatitudeRows::cells ? cell_lat_ + 1 : cell_lat_ - 1;
  }
  faces.global_shape_[faces.global_shape_.size() - 2] = nlat;
  return faces;
}

ShardRange Decomposition::lat_range(int grid_lat) const {
  if (grid_lat < 0 || grid_lat >= grid_.lat) {
    throw InvalidArgument("Decomposition: process-grid row " + std::to_string(grid_lat) + " is outside the " +
                          grid_.str() + " process grid");
  }
  ShardRange r{layout_->lat[grid_lat], layout_->lat[grid_lat + 1] - layout_->lat[grid_lat]};
  if (stagger_ != Stagger::lat_face) return r;
  // A face belongs to the rank of the row south of it (the higher row index).
  if (rows_ == LatitudeRows::cells) {
    if (grid_lat == grid_.lat - 1) ++r.length;  // face i is row i's north face; the south pole face nlat too
  } else if (grid_lat == 0) {
    --r.length;  // face i lies between rows i and i + 1: none north of the north pole row
  } else {
    --r.start;
  }
  return r;
}

ShardRange Decomposition::lon_range(int grid_lon) const {
  if (grid_lon < 0 || grid_lon >= grid_.lon) {
    throw InvalidArgument("Decomposition: process-grid column " + std::to_string(grid_lon) + " is outside the " +
                          grid_.str() + " process grid");
  }
  return {layout_->lon[grid_lon], layout_->lon[grid_lon + 1] - layout_->lon[grid_lon]};
}

namespace {

// The block of `bounds` holding cell `index` (clamped to the blocks).
int block_of(std::int64_t index, const std::vector<std::int64_t>& bounds) {
  const auto it = std::upper_bound(bounds.begin() + 1, bounds.end() - 1, index);
  return static_cast<int>(it - bounds.begin()) - 1;
}

}  // namespace

int Decomposition::lat_block_of(std::int64_t i) const {
  if (stagger_ == Stagger::lat_face) {
    // The block of the row south of face i (lat_range's rule), clamped to the grid.
    i = std::clamp<std::int64_t>(rows_ == LatitudeRows::cells ? i : i + 1, 0, cell_lat_ - 1);
  }
  return block_of(i, layout_->lat);
}

int Decomposition::lon_block_of(std::int64_t i) const { return block_of(i, layout_->lon); }

LocalBox Decomposition::box_of(int rank) const {
  const GridCoords c = coords_of(rank);
  return {lat_range(c.lat), lon_range(c.lon)};
}

Shape Decomposition::local_shape(const Shape& leading) const {
  Shape s = leading;
  const LocalBox b = box();
  s.push_back(b.lat.length);
  s.push_back(b.lon.length);
  return s;
}

std::string Decomposition::str() const {
  std::string staggering;
  if (stagger_ != Stagger::none) staggering = " " + std::string(stagger_name(stagger_));
  if (stagger_ == Stagger::lat_face && rows_ == LatitudeRows::pole_points) staggering += " pole-point rows";
  return shape_str(global_shape_) + staggering + " over " + grid_.str() + " (rank " + std::to_string(rank_) + ": " +
         box().str() + ")";
}

namespace {

// The (lat, lon) box of `rank` inside a global field (leading dims whole).
Tensor box_view(const Tensor& global, const LocalBox& b) {
  const int d = global.dim();
  return global.narrow(d - 2, b.lat.start, b.lat.length).narrow(d - 1, b.lon.start, b.lon.length);
}

Shape leading_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// Element counts and displacements of every rank's box in rank order, for *v collectives.
struct Blocks {
  std::vector<int> counts, displs;
  std::int64_t total = 0;
};

Blocks blocks_of(const Decomposition& d, std::int64_t leading_numel, const std::string& what) {
  Blocks b;
  for (int r = 0; r < d.size(); ++r) {
    const LocalBox box = d.box_of(r);
    const std::int64_t n = tessera::detail::checked_mul(
        tessera::detail::checked_mul(leading_numel, box.lat.length, what), box.lon.length, what);
    if (n > INT_MAX - b.total) {
      throw UnsupportedError(what + ": the field has more than " + std::to_string(INT_MAX) +
                             " elements, the limit of MPI's int counts");
    }
    b.counts.push_back(static_cast<int>(n));
    b.displs.push_back(static_cast<int>(b.total));
    b.total += n;
  }
  return b;
}

// The checks scatter and gather share, agreed across the domain ranks: root, local
// shape, the root's global field, the same dtype and leading dims everywhere. Returns
// every rank's block of the packed field.
Blocks checked_blocks(const Decomposition& d, const Tensor& global, const Tensor& local, int root,
                      const std::string& what) {
  Blocks blocks;
  agree_on_success(d.comm().mpi_comm(), [&] {
    if (root < 0 || root >= d.size()) {
      throw InvalidArgument(what + ": root " + std::to_string(root) + " is not a domain rank");
    }
    if (!local.defined() || local.dim() < 2 || local.shape() != d.local_shape(leading_of(local))) {
      throw ShapeError(what + ": local field " + (local.defined() ? local.str() : std::string("undefined")) +
                       " on domain rank " + std::to_string(d.rank()) + " must have shape " +
                       shape_str(d.local_shape(local.defined() && local.dim() >= 2 ? leading_of(local) : Shape{})) +
                       " (" + d.box().str() + ")");
    }
    if (d.rank() == root) {
      Shape expected = leading_of(local);
      expected.push_back(d.global_lat());
      expected.push_back(d.global_lon());
      if (!global.defined() || global.shape() != expected || global.dtype() != local.dtype()) {
        throw ShapeError(what + ": global field " + (global.defined() ? global.str() : std::string("undefined")) +
                         " on root " + std::to_string(root) + " must be " + std::string(dtype_name(local.dtype())) +
                         shape_str(expected));
      }
    }
    blocks = blocks_of(d, shape_numel(leading_of(local)), what);
  });
  require_same_on_all_ranks(d.comm().mpi_comm(), std::string(dtype_name(local.dtype())) + shape_str(leading_of(local)),
                            what + " (dtype and leading dims of the local fields): the ranks of the domain "
                                   "communicator passed different arguments");
  return blocks;
}

}  // namespace

void Decomposition::scatter(const Tensor& global, Tensor& local, int root) const {
  const Blocks blocks = checked_blocks(*this, global, local, root, "Decomposition::scatter");

  if (size() == 1) {
    local.copy_from(global);
    return;
  }
  // Root packs every rank's box in rank order; every rank receives its own contiguously.
  Tensor packed;
  if (rank_ == root) {
    packed = Tensor::empty({blocks.total}, global.dtype());
    const Tensor g = global.to(Device::host());  // the tensor itself on the host
    for (int r = 0; r < size(); ++r) {
      const Tensor src = box_view(g, box_of(r));
      packed.narrow(0, blocks.displs[r], blocks.counts[r]).reshape(src.shape()).copy_from(src);
    }
  }
  Tensor mine = Tensor::empty(local.shape(), local.dtype());
  const MPI_Datatype type = tessera::detail::mpi_datatype(local.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Iscatterv(rank_ == root ? packed.data() : nullptr, blocks.counts.data(),
                                  blocks.displs.data(), type, mine.data(), blocks.counts[rank_], type, root,
                                  comm_->mpi_comm(), &request));
  tessera::detail::wait_request(request, comm_->wait_options(), {"Decomposition::scatter (MPI_Iscatterv)", comm_->mpi_comm()});
  local.copy_from(mine);
}

Tensor Decomposition::scatter(const Tensor& global, DType dtype, int root) const {
  Tensor local = Tensor::empty(local_shape(), dtype);
  scatter(global, local, root);
  return local;
}

void Decomposition::gather(const Tensor& local, Tensor& global, int root) const {
  const Blocks blocks = checked_blocks(*this, global, local, root, "Decomposition::gather");

  if (size() == 1) {
    global.copy_from(local);
    return;
  }
  const Tensor mine = local.to(Device::host()).contiguous();  // no copy for a contiguous host tensor
  Tensor packed;
  if (rank_ == root) packed = Tensor::empty({blocks.total}, local.dtype());
  const MPI_Datatype type = tessera::detail::mpi_datatype(local.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Igatherv(mine.data(), blocks.counts[rank_], type, rank_ == root ? packed.data() : nullptr,
                                 blocks.counts.data(), blocks.displs.data(), type, root, comm_->mpi_comm(),
                                 &request));
  tessera::detail::wait_request(request, comm_->wait_options(), {"Decomposition::gather (MPI_Igatherv)", comm_->mpi_comm()});
  if (rank_ != root) return;
  for (int r = 0; r < size(); ++r) {
    Tensor dst = box_view(global, box_of(r));
    dst.copy_from(packed.narrow(0, blocks.displs[r], blocks.counts[r]).reshape(dst.shape()));
  }
}

Tensor Decomposition::gather(const Tensor& local, int root) const {
  // Non-roots learn nothing about the global tensor; they pass an undefined one.
  Tensor global;
  if (rank_ == root && local.defined() && local.dim() >= 2) {
    Shape s = leading_of(local);
    s.push_back(global_lat());
    s.push_back(global_lon());
    global = Tensor::empty(s, local.dtype());
  }
  gather(local, global, root);
  return global;
}

}  // namespace tessera::domain
