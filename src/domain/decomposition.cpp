// Decomposition: the arithmetic of who owns which (lat, lon) box, and scatter/gather of
// whole fields through one MPI_Scatterv / MPI_Gatherv.

#include "tessera/domain/decomposition.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "comm/mpi_types.hpp"
#include "comm/request_state.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/mesh.hpp"

namespace tessera::domain {

std::string_view stagger_name(Stagger stagger) noexcept {
  switch (stagger) {
    case Stagger::none: return "none";
    case Stagger::lon_face: return "lon_face";
    case Stagger::lat_face: return "lat_face";
  }
  return "?";
}

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

Decomposition::Decomposition(Communicator& comm, Shape global_shape)
    : Decomposition(comm, std::move(global_shape), ProcessGrid{comm.size(), 1}) {}

Decomposition::Decomposition(const Mesh& mesh, Shape global_shape)
    : Decomposition(mesh.domain(), std::move(global_shape)) {}

Decomposition::Decomposition(const Mesh& mesh, Shape global_shape, ProcessGrid grid)
    : Decomposition(mesh.domain(), std::move(global_shape), grid) {}

Decomposition::Decomposition(Communicator& comm, Shape global_shape, ProcessGrid grid)
    : comm_(&comm), rank_(comm.rank()), grid_(grid), global_shape_(std::move(global_shape)) {
  validate();
  cell_lat_ = global_lat();
  // Everything above is local arithmetic on the arguments, so identical arguments give
  // identical verdicts; this one all-reduce makes sure the arguments were identical.
  require_same_on_all_ranks(comm.mpi_comm(), str_of_args(),
      "Decomposition: the ranks of the domain communicator passed different arguments");
}

std::string Decomposition::str_of_args() const { return shape_str(global_shape_) + " over " + grid_.str(); }

void Decomposition::validate() {
  // The dims and the grid labelled: a Fortran caller declares (lon, lat, ...) and passes
  // its grid lon first, so bare "[10, 13] over 11x1" would read backwards to it.
  const std::string what = "Decomposition of " + shape_str(global_shape_) + " (lat, lon last) over a " +
                           grid_.labelled_str() + " process grid";
  if (global_shape_.size() < 2) {
    throw InvalidArgument(what + ": the global shape needs at least the two dims (lat, lon)");
  }
  for (std::int64_t e : global_shape_) {
    if (e < 0) throw InvalidArgument(what + ": negative extent");
  }
  // The product of the extents must be countable (a C or Fortran caller's shape can be
  // anything): ShapeError naming the shape otherwise.
  (void)tessera::detail::checked_numel(global_shape_, what);
  // lat * lon in int overflowed (undefined behaviour) for a grid no launch can have.
  const auto ranks = tessera::detail::try_mul(grid_.lat, grid_.lon);
  if (grid_.lat < 1 || grid_.lon < 1 || !ranks || *ranks != comm_->size()) {
    throw InvalidArgument(what + ": the process grid must hold exactly the " +
                          std::to_string(comm_->size()) + " ranks of the domain communicator");
  }
  // A rank without cells would have nothing to send and break every neighbour relation;
  // report the first such rank (the same one on every rank).
  if (global_lat() < grid_.lat) {
    const int r = rank_of({static_cast<int>(global_lat()), 0});
    throw InvalidArgument(what + ": domain rank " + std::to_string(r) + " would own 0 of the " +
                          std::to_string(global_lat()) + " latitudes (" + std::to_string(grid_.lat) +
                          " ranks along latitude)");
  }
  if (global_lon() < grid_.lon) {
    const int r = rank_of({0, static_cast<int>(global_lon())});
    throw InvalidArgument(what + ": domain rank " + std::to_string(r) + " would own 0 of the " +
                          std::to_string(global_lon()) + " longitudes (" + std::to_string(grid_.lon) +
                          " ranks along longitude)");
  }
}

GridCoords Decomposition::coords_of(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw InvalidArgument("Decomposition: rank " + std::to_string(rank) + " is outside the " + grid_.str() +
                          " process grid");
  }
  return {rank / grid_.lon, rank % grid_.lon};
}

int Decomposition::rank_of(GridCoords c) const {
  if (c.lat < 0 || c.lat >= grid_.lat || c.lon < 0 || c.lon >= grid_.lon) {
    throw InvalidArgument("Decomposition: grid position (" + std::to_string(c.lat) + ", " + std::to_string(c.lon) +
                          ") is outside the " + grid_.str() + " process grid");
  }
  return c.lat * grid_.lon + c.lon;
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
  ShardRange r = shard_range(cell_lat_, grid_.lat, grid_lat);
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

ShardRange Decomposition::lon_range(int grid_lon) const { return shard_range(global_lon(), grid_.lon, grid_lon); }

namespace {

// Inverse of shard_range: the first global % parts blocks hold base + 1.
int block_of(std::int64_t index, std::int64_t global, int parts) {
  const std::int64_t base = global / parts, extra = global % parts;
  const std::int64_t big = extra * (base + 1);
  if (index < big) return static_cast<int>(index / (base + 1));
  return static_cast<int>(extra + (index - big) / base);
}

}  // namespace

int Decomposition::lat_block_of(std::int64_t i) const {
  if (stagger_ == Stagger::lat_face) {
    // The block of the row south of face i (lat_range's rule), clamped to the grid.
    i = std::clamp<std::int64_t>(rows_ == LatitudeRows::cells ? i : i + 1, 0, cell_lat_ - 1);
  }
  return block_of(i, cell_lat_, grid_.lat);
}

int Decomposition::lon_block_of(std::int64_t i) const { return block_of(i, global_lon(), grid_.lon); }

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
