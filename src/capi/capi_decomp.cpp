// C API: domain decomposition of a (lat, lon) grid over a communicator.

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/domain/global_sum.hpp"

#include <regex>

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;
using tessera::domain::Decomposition;
using tessera::domain::ProcessGrid;

namespace {

ProcessGrid grid_of(const Communicator& comm, int grid_lat, int grid_lon) {
  if (grid_lat == 0 && grid_lon == 0) return ProcessGrid{comm.size(), 1};
  // The Decomposition checks the grid too, in its own (lat, lon) terms; checked here first
  // so that the message names the caller's arguments: a Fortran caller gave the grid lon
  // first (procs = [plon, plat]). The product is computed without wrapping: INT_MAX^2
  // wrapped to 1 and matched a one-rank communicator.
  const std::string grid = capi::caller_is_fortran()
                               ? "[plon, plat] = [" + std::to_string(grid_lon) + ", " + std::to_string(grid_lat) + "]"
                               : "grid_lat (" + std::to_string(grid_lat) + ") * grid_lon (" +
                                     std::to_string(grid_lon) + ")";
  const auto ranks = detail::try_mul(grid_lat, grid_lon);
  if (grid_lat < 1 || grid_lon < 1 || !ranks || *ranks != comm.size()) {
    throw InvalidArgument("process grid " + grid + (ranks ? "" : " overflows int;") + " must hold exactly the " +
                          std::to_string(comm.size()) + " ranks of the communicator");
  }
  return ProcessGrid{grid_lat, grid_lon};
}

// Builds the handle around the decomposition `make` returns over the handle's own
// communicator.
void create(std::shared_ptr<Communicator> comm, std::int64_t nlat, std::int64_t nlon,
            const std::function<Decomposition(Communicator&, Shape)>& make, tessera_decomp_t** out) {
  // Negative extents are the decomposition's argument error; a product that overflows
  // is a shape error here, before any global field size is computed from it.
  if (nlat > 0 && nlon > 0) detail::checked_mul(nlat, nlon, "the global grid nlat * nlon");
  auto state = std::make_shared<tessera_decomp_state>();
  state->comm = std::move(comm);
  state->d.emplace(make(*state->comm, Shape{nlat, nlon}));
  auto handle = std::make_unique<tessera_decomp>();
  handle->state = std::move(state);
  *out = handle.release();
}

void create(std::shared_ptr<Communicator> comm, std::int64_t nlat, std::int64_t nlon, int grid_lat, int grid_lon,
            tessera_decomp_t** out) {
  create(std::move(comm), nlat, nlon,
         [&](Communicator& c, Shape shape) { return Decomposition(c, std::move(shape), grid_of(c, grid_lat, grid_lon)); },
         out);
}

// A duplicate of the caller's communicator (topology included: MPI_Comm_dup keeps it).
std::shared_ptr<Communicator> own_comm(MPI_Comm comm, tessera_decomp_t** out) {
  require(out, "the output handle pointer");
  *out = nullptr;
  capi::require_mpi();
  if (comm == MPI_COMM_NULL) throw InvalidArgument("the communicator is MPI_COMM_NULL");
  return std::make_shared<Communicator>(comm);
}

void create_from_comm(MPI_Comm comm, std::int64_t nlat, std::int64_t nlon, int grid_lat, int grid_lon,
                      tessera_decomp_t** out) {
  create(own_comm(comm, out), nlat, nlon, grid_lat, grid_lon, out);
}

tessera::domain::SplitRule to_split(int split) {
  switch (split) {
    case TESSERA_SPLIT_FIRST_RANKS: return tessera::domain::SplitRule::first_ranks;
    case TESSERA_SPLIT_LAST_RANK: return tessera::domain::SplitRule::last_rank;
    default:
      throw InvalidArgument("split rule " + std::to_string(split) +
                            " is not TESSERA_SPLIT_FIRST_RANKS (0) or TESSERA_SPLIT_LAST_RANK (1)");
  }
}

tessera::domain::CartesianOrder to_order(int order) {
  switch (order) {
    case TESSERA_CART_LAT_LON: return tessera::domain::CartesianOrder::lat_lon;
    case TESSERA_CART_LON_LAT: return tessera::domain::CartesianOrder::lon_lat;
    default:
      throw InvalidArgument("Cartesian dimension order " + std::to_string(order) +
                            " is not TESSERA_CART_LAT_LON (0) or TESSERA_CART_LON_LAT (1)");
  }
}

void create_split(MPI_Comm comm, std::int64_t nlat, std::int64_t nlon, int grid_lat, int grid_lon, int split,
                  tessera_decomp_t** out) {
  const auto rule = to_split(split);
  create(own_comm(comm, out), nlat, nlon, [&](Communicator& c, Shape shape) {
    return Decomposition::with_split(c, std::move(shape), grid_of(c, grid_lat, grid_lon), rule);
  }, out);
}

void create_cart(MPI_Comm comm, std::int64_t nlat, std::int64_t nlon, int order, int split, tessera_decomp_t** out) {
  const auto cart_order = to_order(order);
  const auto rule = to_split(split);
  create(own_comm(comm, out), nlat, nlon, [&](Communicator& c, Shape shape) {
    return Decomposition::from_cartesian(c, std::move(shape), cart_order, rule);
  }, out);
}

// The caller's box as (lat, lon) ranges; a Fortran caller's 1-based starts are already
// converted by the module.
tessera::domain::LocalBox box_arguments(int64_t lat_start, int64_t lat_count, int64_t lon_start, int64_t lon_count) {
  return {{lat_start, lat_count}, {lon_start, lon_count}};
}

void create_boxes(MPI_Comm comm, std::int64_t nlat, std::int64_t nlon, const tessera::domain::LocalBox& mine,
                  tessera_decomp_t** out) {
  create(own_comm(comm, out), nlat, nlon, [&](Communicator& c, Shape shape) {
    return Decomposition::from_boxes(c, std::move(shape), mine);
  }, out);
}

// The decomposition's box messages (check_box, from_boxes) speak tessera's 0-based
// (lat, lon) terms: "lat [0, 6) x lon [8, 17)", a "[nlat, nlon] (lat, lon last)" grid.
// A Fortran caller gave its boxes lon first and 1-based, so for it every box becomes
// capi::caller_box's "lon 9:17 x lat 1:6", a lone range "longitudes 9:17", and the grid
// "[nlon, nlat] (lon, lat)".
std::string fortran_worded(const std::string& message) {
  static const std::regex box(R"(lat \[(-?\d+), (-?\d+)\) x lon \[(-?\d+), (-?\d+)\))");
  static const std::regex range(R"(\b(lat|lon|latitudes|longitudes) \[(-?\d+), (-?\d+)\))");
  static const std::regex grid(R"(\[(\d+), (\d+)\] \(lat, lon last\))");
  static const std::regex extents(R"(the (\d+) x (\d+) grid)");
  const auto rewrite = [](const std::string& text, const std::regex& re, const auto& replace) {
    std::string out;
    auto last = text.cbegin();
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
      out.append(last, (*it)[0].first);
      out += replace(*it);
      last = (*it)[0].second;
    }
    out.append(last, text.cend());
    return out;
  };
  const auto num = [](const std::ssub_match& m) { return std::stoll(m.str()); };
  std::string text = rewrite(message, box, [&](const std::smatch& m) {
    const std::int64_t lat0 = num(m[1]), lat1 = num(m[2]), lon0 = num(m[3]), lon1 = num(m[4]);
    return capi::caller_box(domain::LocalBox{{lat0, lat1 - lat0}, {lon0, lon1 - lon0}});
  });
  text = rewrite(text, range, [&](const std::smatch& m) {
    const std::int64_t a = num(m[2]), b = num(m[3]);
    return m[1].str() + " " + capi::caller_range(ShardRange{a, b - a});
  });
  text = rewrite(text, grid, [](const std::smatch& m) { return "[" + m[2].str() + ", " + m[1].str() + "] (lon, lat)"; });
  text = rewrite(text, extents, [](const std::smatch& m) {
    return "the " + m[2].str() + " x " + m[1].str() + " (lon x lat) grid";
  });
  for (const char* who : {"Decomposition::check_box: ", "Decomposition::from_boxes: "}) {
    if (text.rfind(who, 0) == 0) text.erase(0, std::char_traits<char>::length(who));
  }
  return text;
}

// Runs `f`; for a Fortran caller, its InvalidArgument reworded by fortran_worded.
template <class F>
void box_call(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    if (!capi::caller_is_fortran()) throw;
    throw InvalidArgument(fortran_worded(e.what()));
  }
}

void box_of(const Decomposition& d, int rank, std::int64_t* lat_start, std::int64_t* lat_count,
            std::int64_t* lon_start, std::int64_t* lon_count) {
  require(lat_start, "lat_start");
  require(lat_count, "lat_count");
  require(lon_start, "lon_start");
  require(lon_count, "lon_count");
  if (rank < 0 || rank >= d.size()) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is outside the decomposition's [0, " +
                          std::to_string(d.size()) + ")");
  }
  const domain::LocalBox box = d.box_of(rank);
  *lat_start = box.lat.start;
  *lat_count = box.lat.length;
  *lon_start = box.lon.start;
  *lon_count = box.lon.length;
}

void check_root(const Decomposition& d, int root) {
  if (root < 0 || root >= d.size()) {
    throw InvalidArgument("root " + std::to_string(root) + " is outside the communicator's [0, " +
                          std::to_string(d.size()) + ")");
  }
}

// The global twin of a local array: lat/lon extents replaced by the global ones, same
// layout (in declaration order the last two dims for C, the first two for Fortran).
Shape global_logical(const Decomposition& d, const Shape& local_logical) {
  Shape g = local_logical;
  g[g.size() - 2] = d.global_lat();
  g[g.size() - 1] = d.global_lon();
  return g;
}

}  // namespace

namespace tessera::capi {

// Shared by the decomposition's and the halo's scatter/gather: argument checks are
// agreed, so a bad pointer on one rank fails every rank instead of hanging the others.
void scatter_gather(const Decomposition& d, bool gather, int root, const CallerArrays& arrays,
                    const std::function<Tensor(Tensor)>& to_local, const std::string& what) {
  Tensor local, whole;
  agree_on_success(d.comm().mpi_comm(), [&] {
    check_root(d, root);
    Tensor view = arrays.local();
    if (view.dim() < 2) throw InvalidArgument(what + ": the array needs the two dims lat and lon");
    local = to_local(view);
    check_extents(local.shape(), d.box().lat.length, d.box().lon.length, d.box(), nullptr, "",
                  what + ": the local array");
    if (d.rank() == root) whole = arrays.global(global_logical(d, local.shape()));
  });
  if (gather) {
    d.gather(local, whole, root);
  } else {
    d.scatter(whole, local, root);
  }
}

CallerArrays contiguous_arrays(const void* global, void* local, int dtype, int order, int ndim,
                               const std::int64_t* shape, const std::string& what) {
  return {[=] { return array_view(local, dtype, order, ndim, shape, what + ": the local array"); },
          [=](const Shape& logical) {
            if (global == nullptr) throw InvalidArgument(what + ": the global array is NULL on the root rank");
            return logical_view(const_cast<void*>(global), to_dtype(dtype, what), logical, what + ": the global array");
          }};
}

}  // namespace tessera::capi

extern "C" {

int tessera_decomp_create(MPI_Comm comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                          tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create",
                 [&] { create_from_comm(comm, nlat, nlon, grid_lat, grid_lon, decomp); });
}

int tessera_decomp_create_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                            tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_f", [&] {
    create_from_comm(capi::comm_from_fortran(comm), nlat, nlon, grid_lat, grid_lon, decomp);
  });
}

int tessera_decomp_create_split(MPI_Comm comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                                tessera_split_t split, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_split",
                 [&] { create_split(comm, nlat, nlon, grid_lat, grid_lon, split, decomp); });
}

int tessera_decomp_create_split_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                                  tessera_split_t split, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_split_f", [&] {
    create_split(capi::comm_from_fortran(comm), nlat, nlon, grid_lat, grid_lon, split, decomp);
  });
}

int tessera_decomp_create_cart(MPI_Comm cart, int64_t nlat, int64_t nlon, tessera_cart_order_t order,
                               tessera_split_t split, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_cart", [&] { create_cart(cart, nlat, nlon, order, split, decomp); });
}

int tessera_decomp_create_cart_f(MPI_Fint cart, int64_t nlat, int64_t nlon, tessera_cart_order_t order,
                                 tessera_split_t split, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_cart_f",
                 [&] { create_cart(capi::comm_from_fortran(cart), nlat, nlon, order, split, decomp); });
}

int tessera_decomp_create_boxes(MPI_Comm comm, int64_t nlat, int64_t nlon, int64_t lat_start, int64_t lat_count,
                                int64_t lon_start, int64_t lon_count, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_boxes", [&] {
    create_boxes(comm, nlat, nlon, box_arguments(lat_start, lat_count, lon_start, lon_count), decomp);
  });
}

int tessera_decomp_create_boxes_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int64_t lat_start, int64_t lat_count,
                                  int64_t lon_start, int64_t lon_count, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_boxes_f", [&] {
    box_call([&] {
      create_boxes(capi::comm_from_fortran(comm), nlat, nlon,
                   box_arguments(lat_start, lat_count, lon_start, lon_count), decomp);
    });
  });
}

int tessera_decomp_check_box(const tessera_decomp_t* decomp, int64_t lat_start, int64_t lat_count,
                             int64_t lon_start, int64_t lon_count) {
  return guarded("tessera_decomp_check_box", [&] {
    box_call([&] {
      capi::decomposition_of(decomp).check_box(box_arguments(lat_start, lat_count, lon_start, lon_count));
    });
  });
}

int tessera_decomp_periodic(const tessera_decomp_t* decomp, int* lat, int* lon) {
  return guarded("tessera_decomp_periodic", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    const auto known = [](std::optional<bool> p) { return p ? static_cast<int>(*p) : -1; };
    *require(lat, "lat") = known(d.periodic_lat());
    *require(lon, "lon") = known(d.periodic_lon());
  });
}

int tessera_decomp_create_from_mesh(const tessera_mesh_t* mesh, int64_t nlat, int64_t nlon, int grid_lat,
                                    int grid_lon, tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_create_from_mesh", [&] {
    require(decomp, "the output handle pointer");
    *decomp = nullptr;
    require(mesh, "the mesh handle");
    if (!mesh->mesh) throw InvalidArgument("the mesh handle is not initialised");
    // Aliasing pointer: the domain communicator keeps the whole mesh alive.
    std::shared_ptr<Communicator> comm(mesh->mesh, &mesh->mesh->domain());
    create(std::move(comm), nlat, nlon, grid_lat, grid_lon, decomp);
  });
}

int tessera_decomp_destroy(tessera_decomp_t** decomp) {
  return guarded("tessera_decomp_destroy", [&] {
    require(decomp, "the pointer to the decomposition handle");
    std::unique_ptr<tessera_decomp> owned(*decomp);
    *decomp = nullptr;
  });
}

int tessera_decomp_rank(const tessera_decomp_t* decomp, int* rank) {
  return guarded("tessera_decomp_rank", [&] { *require(rank, "rank") = capi::decomposition_of(decomp).rank(); });
}

int tessera_decomp_size(const tessera_decomp_t* decomp, int* size) {
  return guarded("tessera_decomp_size", [&] { *require(size, "size") = capi::decomposition_of(decomp).size(); });
}

int tessera_decomp_global(const tessera_decomp_t* decomp, int64_t* nlat, int64_t* nlon) {
  return guarded("tessera_decomp_global", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    *require(nlat, "nlat") = d.global_lat();
    *require(nlon, "nlon") = d.global_lon();
  });
}

int tessera_decomp_grid(const tessera_decomp_t* decomp, int* grid_lat, int* grid_lon) {
  return guarded("tessera_decomp_grid", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    *require(grid_lat, "grid_lat") = d.grid().lat;
    *require(grid_lon, "grid_lon") = d.grid().lon;
  });
}

int tessera_decomp_coords(const tessera_decomp_t* decomp, int* lat, int* lon) {
  return guarded("tessera_decomp_coords", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    *require(lat, "lat") = d.coords().lat;
    *require(lon, "lon") = d.coords().lon;
  });
}

int tessera_decomp_box(const tessera_decomp_t* decomp, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                       int64_t* lon_count) {
  return guarded("tessera_decomp_box", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    box_of(d, d.rank(), lat_start, lat_count, lon_start, lon_count);
  });
}

int tessera_decomp_box_of(const tessera_decomp_t* decomp, int rank, int64_t* lat_start, int64_t* lat_count,
                          int64_t* lon_start, int64_t* lon_count) {
  return guarded("tessera_decomp_box_of", [&] {
    box_of(capi::decomposition_of(decomp), rank, lat_start, lat_count, lon_start, lon_count);
  });
}

int tessera_decomp_comm(const tessera_decomp_t* decomp, MPI_Comm* comm) {
  return guarded("tessera_decomp_comm",
                 [&] { *require(comm, "comm") = capi::decomposition_of(decomp).comm().mpi_comm(); });
}

int tessera_decomp_comm_f(const tessera_decomp_t* decomp, MPI_Fint* comm) {
  return guarded("tessera_decomp_comm_f", [&] {
    *require(comm, "comm") = MPI_Comm_c2f(capi::decomposition_of(decomp).comm().mpi_comm());
  });
}

int tessera_decomp_scatter(const tessera_decomp_t* decomp, const void* global, void* local, tessera_dtype_t dtype,
                           tessera_order_t order, int ndim, const int64_t* local_shape, int root) {
  return guarded("tessera_decomp_scatter", [&] {
    capi::scatter_gather(capi::decomposition_of(decomp), false, root,
                         capi::contiguous_arrays(global, local, dtype, order, ndim, local_shape, "scatter"),
                         [](Tensor t) { return t; }, "scatter");
  });
}

int tessera_decomp_global_sum(const tessera_decomp_t* decomp, const void* local, tessera_dtype_t dtype,
                              tessera_order_t order, int ndim, const int64_t* local_shape, double* sum) {
  return guarded("tessera_decomp_global_sum", [&] {
    const Decomposition& d = capi::decomposition_of(decomp);
    Tensor view;
    // Argument checks agreed first: a bad pointer on one rank fails every rank.
    agree_on_success(d.comm().mpi_comm(), [&] {
      capi::require(sum, "the sum pointer");
      view = capi::array_view(const_cast<void*>(local), dtype, order, ndim, local_shape, "the local array");
      capi::check_extents(view.shape(), d.box().lat.length, d.box().lon.length, d.box(), nullptr, "",
                          "the local array");
    });
    *sum = tessera::domain::global_sum(d, view);
  });
}

int tessera_decomp_auto_grid(int ranks, int64_t nlat, int64_t nlon, int* grid_lat, int* grid_lon) {
  return guarded("tessera_decomp_auto_grid", [&] {
    capi::require(grid_lat, "the grid_lat pointer");
    capi::require(grid_lon, "the grid_lon pointer");
    const ProcessGrid g = tessera::domain::auto_process_grid(ranks, nlat, nlon);
    *grid_lat = g.lat;
    *grid_lon = g.lon;
  });
}

int tessera_decomp_gather(const tessera_decomp_t* decomp, const void* local, void* global, tessera_dtype_t dtype,
                          tessera_order_t order, int ndim, const int64_t* local_shape, int root) {
  return guarded("tessera_decomp_gather", [&] {
    capi::scatter_gather(capi::decomposition_of(decomp), true, root,
                         capi::contiguous_arrays(global, const_cast<void*>(local), dtype, order, ndim, local_shape,
                                                 "gather"),
                         [](Tensor t) { return t; }, "gather");
  });
}

}  // extern "C"
