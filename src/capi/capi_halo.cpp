// C API: halo exchange on caller-owned arrays, cell-centred or on the faces of a C-grid.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;
using tessera::domain::HaloExchange;
using tessera::domain::HaloSpec;
using tessera::domain::LatitudeRows;
using tessera::domain::PolePolicy;
using tessera::domain::Stagger;

namespace {

// A halo handle with its C-grid state. Every tessera_halo is made by tessera_halo_create
// below as one of these (and freed as one by tessera_halo_destroy), so the functions of
// this file may see a handle as its HaloState. Cell-centred and east-face fields share
// the cells' plan (`exchange`: the half-turn across a pole maps east face j to east face
// j + nlon/2, as it maps cells); latitude-face fields have their own plan.
struct HaloState : tessera_halo {
  std::vector<Stagger> staggers;                // per registered field
  std::optional<HaloExchange> lat_faces;        // the plan of the lat_face fields
  std::string lat_faces_error;                  // why there is none
  std::vector<Tensor> cell_fields, face_fields;  // the registered fields by plan
};

HaloState& state_of(tessera_halo* halo) {
  capi::exchange_of(halo);  // checks the handle
  return static_cast<HaloState&>(*halo);
}
const HaloState& state_of(const tessera_halo* halo) {
  capi::exchange_of(halo);
  return static_cast<const HaloState&>(*halo);
}

bool in_flight(const HaloState& h) { return h.exchange->in_flight() || (h.lat_faces && h.lat_faces->in_flight()); }

Stagger to_stagger(int stagger) {
  switch (stagger) {
    case TESSERA_STAGGER_NONE: return Stagger::none;
    case TESSERA_STAGGER_LON_FACE: return Stagger::lon_face;
    case TESSERA_STAGGER_LAT_FACE: return Stagger::lat_face;
    default:
      throw InvalidArgument("stagger " + std::to_string(stagger) +
                            " is not TESSERA_STAGGER_NONE (0), _LON_FACE (1) or _LAT_FACE (2)");
  }
}

// The plan exchanging fields on `stagger`.
const HaloExchange& plan_of(const HaloState& h, Stagger stagger) {
  if (stagger != Stagger::lat_face) return *h.exchange;
  if (!h.lat_faces) throw InvalidArgument("no field on latitude faces: " + h.lat_faces_error);
  return *h.lat_faces;
}
HaloExchange& plan_of(HaloState& h, Stagger stagger) {
  return const_cast<HaloExchange&>(plan_of(std::as_const(h), stagger));
}

PolePolicy to_pole(int pole) {
  switch (pole) {
    case TESSERA_POLE_ZERO: return PolePolicy::zero;
    case TESSERA_POLE_REPLICATE: return PolePolicy::replicate;
    case TESSERA_POLE_ACROSS_POLE: return PolePolicy::across_pole;
    case TESSERA_POLE_ACROSS_POLE_POINT: return PolePolicy::across_pole_point;
    default:
      throw InvalidArgument("pole policy " + std::to_string(pole) +
                            " is not TESSERA_POLE_ZERO (0), _REPLICATE (1), _ACROSS_POLE (2) or _ACROSS_POLE_POINT (3)");
  }
}

std::string field_label(const tessera_halo_t* halo) {
  return "field " + capi::caller_index(static_cast<std::int64_t>(halo->fields.size()));
}

// HaloExchange agrees on a field set collectively only when it differs from the set it
// last validated, and its "last validated" starts out equal to the empty set: a rank
// with no fields skipped the agreement the other ranks waited in, and the first
// exchange hung. So the first exchange of a handle (start, exchange or adjoint) agrees
// on the field count first; on a mismatch every rank fails with the same message.
// The same holds after the first exchange: a registration that failed on one rank only
// (a Fortran field rejected as not contiguous, a shape error) left that rank's set as it
// was validated while the others' changed, and the next exchange hung. So every
// registration call, successful or not, and every clear_fields makes the next exchange
// agree on the count again (forget_agreed_count); ranks that make the same calls pay
// one small all-reduce per change of the field set, none per exchange.
void forget_agreed_count(tessera_halo_t* halo) { halo->field_count_agreed = false; }

// The counts agreed are those of each plan (cells and east faces; latitude faces): a
// rank that put a field on other faces than the others would run another plan.
HaloState& agreed_exchange(tessera_halo* halo) {
  HaloState& h = state_of(halo);
  if (halo->field_count_agreed) return h;
  Communicator& comm = h.exchange->decomposition().comm();
  const auto cells = static_cast<std::int64_t>(h.cell_fields.size());
  const auto faces = static_cast<std::int64_t>(h.face_fields.size());
  if (!same_on_all_ranks(comm.mpi_comm(), std::to_string(cells) + "+" + std::to_string(faces))) {
    // Every rank is here: learn the counts to name the first rank that differs from rank 0.
    Tensor counts = Tensor::empty({2 * comm.size()}, DType::i64);
    comm.all_gather(Tensor::from_vector<std::int64_t>({cells, faces}, {2}), counts);
    const std::vector<std::int64_t> all = counts.to_vector<std::int64_t>();
    std::size_t r = 1;
    while (r + 1 < all.size() / 2 && all[2 * r] == all[0] && all[2 * r + 1] == all[1]) ++r;
    auto registered = [&](std::size_t rank) {
      const std::int64_t faces = all[2 * rank + 1];
      return std::to_string(all[2 * rank] + faces) + " field(s)" +
             (faces > 0 ? " (" + std::to_string(faces) + " on latitude faces)" : std::string());
    };
    throw InvalidArgument("the ranks of the halo's communicator registered different fields: rank 0 registered " +
                          registered(0) + ", rank " + std::to_string(r) + " registered " + registered(r) +
                          "; every rank registers the same fields before an exchange");
  }
  halo->field_count_agreed = true;
  return h;
}

void register_field(tessera_halo* halo, Tensor view, Stagger stagger, int* index) {
  HaloState& h = state_of(halo);
  if (in_flight(h)) throw InvalidArgument("cannot register a field while an exchange is in flight");
  capi::check_padded(plan_of(h, stagger), view, field_label(halo));
  (stagger == Stagger::lat_face ? h.face_fields : h.cell_fields).push_back(view);
  h.staggers.push_back(stagger);
  halo->fields.push_back(std::move(view));
  if (index != nullptr) *index = static_cast<int>(halo->fields.size()) - 1;
}

// Registers a field in any layout: `shape` is tessera's view (leading..., padded lat,
// padded lon), `strides` the distance in elements along each of those dims.
void register_strided(tessera_halo* halo, void* data, int dtype, int ndim, const int64_t* shape,
                      const int64_t* strides, Stagger stagger, int* index) {
  const std::string what = field_label(halo);
  Tensor view = capi::strided_view(data, dtype, ndim, shape, strides, what);
  if (view.dim() < 2) throw InvalidArgument(what + ": a field needs the two dims lat and lon");
  register_field(halo, std::move(view), stagger, index);
}

// The edge argument of tessera_halo_create_edges; TESSERA_EDGE_POLE only on a latitude edge.
domain::EdgePolicy to_edge(int edge, const char* which) {
  const bool latitude = which[0] == 'n' || which[0] == 's';
  switch (edge) {
    case TESSERA_EDGE_POLE:
      if (latitude) return domain::EdgePolicy::from_spec;
      break;
    case TESSERA_EDGE_PERIODIC: return domain::EdgePolicy::periodic;
    case TESSERA_EDGE_ZERO: return domain::EdgePolicy::zero;
    case TESSERA_EDGE_NONE: return domain::EdgePolicy::none;
    case TESSERA_EDGE_REPLICATE: return domain::EdgePolicy::replicate;
    case TESSERA_EDGE_MIRROR_EVEN: return domain::EdgePolicy::mirror_even;
    case TESSERA_EDGE_MIRROR_ODD: return domain::EdgePolicy::mirror_odd;
    default: break;
  }
  throw InvalidArgument(std::string("the ") + which + " edge policy " + std::to_string(edge) +
                        (edge == TESSERA_EDGE_POLE ? " (TESSERA_EDGE_POLE) is for the north and south edges only"
                                                   : " is not a tessera_edge_t (0..6)"));
}

// The halo handle of a spec: the cells' plan and, where it can be planned, the latitude
// faces' one.
void create_halo(const tessera_decomp_t* decomp, const domain::HaloWidths& widths, HaloSpec spec,
                 tessera_halo_t** halo) {
  require(halo, "the output handle pointer");
  *halo = nullptr;
  const domain::Decomposition& d = capi::decomposition_of(decomp);
  for (int w : {widths.lat_before, widths.lat_after, widths.lon_before, widths.lon_after}) {
    if (w < 0) throw InvalidArgument("halo width " + std::to_string(w) + " is negative");
  }
  spec.width = widths;
  auto handle = std::make_unique<HaloState>();
  handle->decomp = decomp->state;
  handle->exchange.emplace(d, spec);
  // The latitude faces' plan. A grid whose faces cannot be planned (a halo wider than
  // a band's faces, one pole-point row, periodic latitude) still serves cell-centred
  // fields: its error is kept for a lat_face registration. Planning fails alike on every
  // rank (arithmetic on arguments the cells' plan has just agreed on), so no rank is
  // left in the plan's collective check.
  try {
    const LatitudeRows rows = spec.pole == PolePolicy::across_pole_point ? LatitudeRows::pole_points
                                                                          : LatitudeRows::cells;
    handle->lat_faces.emplace(d.staggered(Stagger::lat_face, rows), spec);
  } catch (const InvalidArgument& e) {
    handle->lat_faces_error = e.what();
  }
  *halo = handle.release();
}

}  // namespace

namespace tessera::capi {

// The plan of the fields on `stagger` (its decomposition gives the faces' global extents
// and this rank's box): the checkpoint's staggered halo fields are blocks of it.
const HaloExchange& staggered_exchange_of(const tessera_halo* halo, int stagger) {
  return plan_of(state_of(halo), to_stagger(stagger));
}

}  // namespace tessera::capi

extern "C" {

int tessera_halo_create(const tessera_decomp_t* decomp, int lat_before, int lat_after, int lon_before, int lon_after,
                        int periodic_lon, tessera_pole_t pole, tessera_halo_t** halo) {
  return guarded("tessera_halo_create", [&] {
    HaloSpec spec;
    spec.periodic_lon = periodic_lon != 0;
    spec.pole = to_pole(pole);
    create_halo(decomp, {lat_before, lat_after, lon_before, lon_after}, spec, halo);
  });
}

int tessera_halo_create_edges(const tessera_decomp_t* decomp, int lat_before, int lat_after, int lon_before,
                              int lon_after, tessera_edge_t north, tessera_edge_t south, tessera_edge_t west,
                              tessera_edge_t east, tessera_pole_t pole, tessera_halo_t** halo) {
  return guarded("tessera_halo_create_edges", [&] {
    HaloSpec spec;
    spec.pole = to_pole(pole);
    spec.north = to_edge(north, "north");
    spec.south = to_edge(south, "south");
    spec.west = to_edge(west, "west");
    spec.east = to_edge(east, "east");
    spec.periodic_lon = spec.west == domain::EdgePolicy::periodic;
    create_halo(decomp, {lat_before, lat_after, lon_before, lon_after}, spec, halo);
  });
}

int tessera_halo_destroy(tessera_halo_t** halo) {
  return guarded("tessera_halo_destroy", [&] {
    require(halo, "the pointer to the halo handle");
    std::unique_ptr<HaloState> owned(static_cast<HaloState*>(*halo));
    *halo = nullptr;
  });
}

int tessera_halo_padded(const tessera_halo_t* halo, int64_t* lat, int64_t* lon) {
  return guarded("tessera_halo_padded", [&] {
    const Shape padded = capi::exchange_of(halo).padded_shape(Shape{});
    *require(lat, "lat") = padded[0];
    *require(lon, "lon") = padded[1];
  });
}

int tessera_halo_add_field(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, tessera_order_t order, int ndim,
                           const int64_t* shape, int* index) {
  return guarded("tessera_halo_add_field", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);  // even if the registration fails below
    Tensor view = capi::array_view(data, dtype, order, ndim, shape, field_label(halo));
    if (view.dim() < 2) throw InvalidArgument(field_label(halo) + ": a field needs the two dims lat and lon");
    register_field(halo, std::move(view), Stagger::none, index);
  });
}

int tessera_halo_add_field_staggered(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, tessera_order_t order,
                                     int ndim, const int64_t* shape, tessera_stagger_t stagger, int* index) {
  return guarded("tessera_halo_add_field_staggered", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);  // even if the registration fails below
    const Stagger s = to_stagger(stagger);
    Tensor view = capi::array_view(data, dtype, order, ndim, shape, field_label(halo));
    if (view.dim() < 2) throw InvalidArgument(field_label(halo) + ": a field needs the two dims lat and lon");
    register_field(halo, std::move(view), s, index);
  });
}

int tessera_halo_padded_staggered(const tessera_halo_t* halo, tessera_stagger_t stagger, int64_t* lat,
                                  int64_t* lon) {
  return guarded("tessera_halo_padded_staggered", [&] {
    const Shape padded = plan_of(state_of(halo), to_stagger(stagger)).padded_shape(Shape{});
    *require(lat, "lat") = padded[0];
    *require(lon, "lon") = padded[1];
  });
}

int tessera_halo_box_staggered(const tessera_halo_t* halo, tessera_stagger_t stagger, int64_t* global_lat,
                               int64_t* global_lon, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                               int64_t* lon_count) {
  return guarded("tessera_halo_box_staggered", [&] {
    const domain::Decomposition& d = plan_of(state_of(halo), to_stagger(stagger)).decomposition();
    const domain::LocalBox box = d.box();
    *require(global_lat, "global_lat") = d.global_lat();
    *require(global_lon, "global_lon") = d.global_lon();
    *require(lat_start, "lat_start") = box.lat.start;
    *require(lat_count, "lat_count") = box.lat.length;
    *require(lon_start, "lon_start") = box.lon.start;
    *require(lon_count, "lon_count") = box.lon.length;
  });
}

int tessera_halo_add_field_strided(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, int ndim,
                                   const int64_t* shape, const int64_t* strides, int* index) {
  return guarded("tessera_halo_add_field_strided", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);  // even if the registration fails below
    register_strided(halo, data, dtype, ndim, shape, strides, Stagger::none, index);
  });
}

int tessera_halo_add_field_staggered_strided(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, int ndim,
                                             const int64_t* shape, const int64_t* strides, tessera_stagger_t stagger,
                                             int* index) {
  return guarded("tessera_halo_add_field_staggered_strided", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);  // even if the registration fails below
    register_strided(halo, data, dtype, ndim, shape, strides, to_stagger(stagger), index);
  });
}

int tessera_halo_clear_fields(tessera_halo_t* halo) {
  return guarded("tessera_halo_clear_fields", [&] {
    HaloState& h = state_of(halo);
    forget_agreed_count(halo);
    if (in_flight(h)) throw InvalidArgument("cannot clear the fields while an exchange is in flight");
    halo->fields.clear();
    halo->vector_components.clear();
    h.staggers.clear();
    h.cell_fields.clear();
    h.face_fields.clear();
  });
}

int tessera_halo_num_fields(const tessera_halo_t* halo, int* count) {
  return guarded("tessera_halo_num_fields", [&] {
    capi::exchange_of(halo);
    *require(count, "count") = static_cast<int>(halo->fields.size());
  });
}

namespace {

// The vector components' sign flip across the poles (tessera_halo_set_vector_pair), by
// the plan of each component's faces.
void flip_vector_components(tessera_halo_t* halo) {
  HaloState& h = state_of(halo);
  for (int index : halo->vector_components) {
    const auto k = static_cast<std::size_t>(index);
    plan_of(h, h.staggers[k]).flip_beyond_poles(halo->fields[k]);
  }
}

// Every exchange runs the plans that have fields, starting all before finishing any
// (their messages overlap; every rank starts them in the same order, cells first, so
// MPI's non-overtaking rule keeps the plans' equal tags apart). Without latitude-face
// fields that is the cells' plan on all fields, as before staggering.
void start_plans(HaloState& h, bool adjoint) {
  if (h.face_fields.empty()) {
    adjoint ? h.exchange->start_adjoint(h.fields) : h.exchange->start(h.fields);
    return;
  }
  if (!h.cell_fields.empty()) adjoint ? h.exchange->start_adjoint(h.cell_fields) : h.exchange->start(h.cell_fields);
  adjoint ? h.lat_faces->start_adjoint(h.face_fields) : h.lat_faces->start(h.face_fields);
}

void finish_plans(HaloState& h, bool adjoint) {
  const bool cells = h.exchange->in_flight(), faces = h.lat_faces && h.lat_faces->in_flight();
  // Neither in flight: the cells' plan says what is wrong.
  if (cells || !faces) adjoint ? h.exchange->finish_adjoint() : h.exchange->finish();
  if (faces) adjoint ? h.lat_faces->finish_adjoint() : h.lat_faces->finish();
}

}  // namespace

int tessera_halo_set_vector_pair(tessera_halo_t* halo, int u_index, int v_index) {
  return guarded("tessera_halo_set_vector_pair", [&] {
    capi::exchange_of(halo);
    const int n = static_cast<int>(halo->fields.size());
    for (int index : {u_index, v_index}) {
      if (index < 0 || index >= n) {
        throw InvalidArgument("field index " + capi::caller_index(index) + " is not one of the " + std::to_string(n) +
                              " registered fields " + capi::caller_range(ShardRange{0, n}));
      }
    }
    if (u_index == v_index) throw InvalidArgument("u and v are the same field (" + capi::caller_index(u_index) + ")");
    for (int index : {u_index, v_index}) {
      if (std::find(halo->vector_components.begin(), halo->vector_components.end(), index) ==
          halo->vector_components.end()) {
        halo->vector_components.push_back(index);
      }
    }
  });
}

int tessera_halo_exchange(tessera_halo_t* halo) {
  return guarded("tessera_halo_exchange", [&] {
    HaloState& h = agreed_exchange(halo);
    start_plans(h, false);
    finish_plans(h, false);
    flip_vector_components(halo);
  });
}

int tessera_halo_start(tessera_halo_t* halo) {
  return guarded("tessera_halo_start", [&] { start_plans(agreed_exchange(halo), false); });
}

int tessera_halo_finish(tessera_halo_t* halo) {
  return guarded("tessera_halo_finish", [&] {
    finish_plans(state_of(halo), false);
    flip_vector_components(halo);
  });
}

int tessera_halo_exchange_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_exchange_adjoint", [&] {
    HaloState& h = agreed_exchange(halo);
    flip_vector_components(halo);
    start_plans(h, true);
    finish_plans(h, true);
  });
}

int tessera_halo_start_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_start_adjoint", [&] {
    HaloState& h = agreed_exchange(halo);
    flip_vector_components(halo);
    start_plans(h, true);
  });
}

int tessera_halo_finish_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_finish_adjoint", [&] { finish_plans(state_of(halo), true); });
}

int tessera_halo_in_flight(const tessera_halo_t* halo, int* in_flight) {
  return guarded("tessera_halo_in_flight", [&] {
    *require(in_flight, "in_flight") = ::in_flight(state_of(halo)) ? 1 : 0;
  });
}

namespace {

// Scatter (gather = false) or gather between root's global field and the interiors of
// the ranks' padded fields on `stagger`.
void scatter_gather_padded(const tessera_halo_t* halo, bool gather, const capi::CallerArrays& arrays, int stagger,
                           int root) {
  const std::string what = gather ? "gather" : "scatter";
  const HaloExchange& ex = plan_of(state_of(halo), to_stagger(stagger));
  capi::scatter_gather(ex.decomposition(), gather, root, arrays,
                       [&](Tensor t) {
                         capi::check_padded(ex, t, what + ": the field");
                         return ex.interior(t);
                       },
                       what);
}

// Root's global array in any layout (`global_shape` and `global_strides` of its view, as
// the field's): its extents must be the field's with the global lat/lon ones.
capi::CallerArrays strided_arrays(const void* global, const int64_t* global_shape, const int64_t* global_strides,
                                  void* field, int dtype, int ndim, const int64_t* shape, const int64_t* strides,
                                  const std::string& what) {
  return {[=] { return capi::strided_view(field, dtype, ndim, shape, strides, what + ": the field"); },
          [=](const Shape& logical) {
            if (global == nullptr) throw InvalidArgument(what + ": the global array is NULL on the root rank");
            require(global_shape, "the global shape pointer");
            const Shape given(global_shape, global_shape + ndim);
            const std::size_t n = logical.size();
            if (given[n - 1] != logical[n - 1] || given[n - 2] != logical[n - 2]) {
              throw ShapeError(what + ": the global array's lon x lat extents " + std::to_string(given[n - 1]) + " x " +
                               std::to_string(given[n - 2]) + " are not the field's global extents " +
                               std::to_string(logical[n - 1]) + " x " + std::to_string(logical[n - 2]));
            }
            if (given != logical) {
              const Shape others(given.begin(), given.end() - 2), expected(logical.begin(), logical.end() - 2);
              throw ShapeError(what + ": the global array's other dims " + capi::caller_shape(others) +
                               " are not the field's " + capi::caller_shape(expected));
            }
            return capi::strided_view(const_cast<void*>(global), dtype, ndim, global_shape, global_strides,
                                      what + ": the global array");
          }};
}

}  // namespace

int tessera_halo_gather(const tessera_halo_t* halo, const void* field, void* global, tessera_dtype_t dtype,
                        tessera_order_t order, int ndim, const int64_t* shape, int root) {
  return guarded("tessera_halo_gather", [&] {
    scatter_gather_padded(halo, true,
                          capi::contiguous_arrays(global, const_cast<void*>(field), dtype, order, ndim, shape,
                                                  "gather"),
                          TESSERA_STAGGER_NONE, root);
  });
}

int tessera_halo_scatter(const tessera_halo_t* halo, const void* global, void* field, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, int root) {
  return guarded("tessera_halo_scatter", [&] {
    scatter_gather_padded(halo, false, capi::contiguous_arrays(global, field, dtype, order, ndim, shape, "scatter"),
                          TESSERA_STAGGER_NONE, root);
  });
}

int tessera_halo_gather_staggered(const tessera_halo_t* halo, const void* field, void* global, tessera_dtype_t dtype,
                                  tessera_order_t order, int ndim, const int64_t* shape, tessera_stagger_t stagger,
                                  int root) {
  return guarded("tessera_halo_gather_staggered", [&] {
    scatter_gather_padded(halo, true,
                          capi::contiguous_arrays(global, const_cast<void*>(field), dtype, order, ndim, shape,
                                                  "gather"),
                          stagger, root);
  });
}

int tessera_halo_scatter_staggered(const tessera_halo_t* halo, const void* global, void* field,
                                   tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* shape,
                                   tessera_stagger_t stagger, int root) {
  return guarded("tessera_halo_scatter_staggered", [&] {
    scatter_gather_padded(halo, false, capi::contiguous_arrays(global, field, dtype, order, ndim, shape, "scatter"),
                          stagger, root);
  });
}

int tessera_halo_gather_staggered_strided(const tessera_halo_t* halo, const void* field, void* global,
                                          tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                          const int64_t* strides, const int64_t* global_shape,
                                          const int64_t* global_strides, tessera_stagger_t stagger, int root) {
  return guarded("tessera_halo_gather_staggered_strided", [&] {
    scatter_gather_padded(halo, true,
                          strided_arrays(global, global_shape, global_strides, const_cast<void*>(field), dtype, ndim,
                                         shape, strides, "gather"),
                          stagger, root);
  });
}

int tessera_halo_scatter_staggered_strided(const tessera_halo_t* halo, const void* global,
                                           const int64_t* global_shape, const int64_t* global_strides, void* field,
                                           tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                           const int64_t* strides, tessera_stagger_t stagger, int root) {
  return guarded("tessera_halo_scatter_staggered_strided", [&] {
    scatter_gather_padded(halo, false,
                          strided_arrays(global, global_shape, global_strides, field, dtype, ndim, shape, strides,
                                         "scatter"),
                          stagger, root);
  });
}

}  // extern "C"
