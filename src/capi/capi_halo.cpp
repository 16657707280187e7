// C API: halo exchange on caller-owned arrays.

#include <algorithm>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;
using tessera::domain::HaloExchange;
using tessera::domain::HaloSpec;
using tessera::domain::PolePolicy;

namespace {

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
  return "field " + std::to_string(halo->fields.size());
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

HaloExchange& agreed_exchange(tessera_halo_t* halo) {
  HaloExchange& ex = capi::exchange_of(halo);
  if (halo->field_count_agreed) return ex;
  Communicator& comm = ex.decomposition().comm();
  const auto mine = static_cast<std::int64_t>(halo->fields.size());
  if (!same_on_all_ranks(comm.mpi_comm(), std::to_string(mine))) {
    // Every rank is here: learn the counts to name the first rank that differs from rank 0.
    Tensor counts = Tensor::empty({comm.size()}, DType::i64);
    comm.all_gather(Tensor::from_vector<std::int64_t>({mine}, {1}), counts);
    const std::vector<std::int64_t> all = counts.to_vector<std::int64_t>();
    std::size_t r = 1;
    while (r + 1 < all.size() && all[r] == all[0]) ++r;
    throw InvalidArgument("the ranks of the halo's communicator registered different fields: rank 0 registered " +
                          std::to_string(all[0]) + " field(s), rank " + std::to_string(r) + " registered " +
                          std::to_string(all[r]) + "; every rank registers the same fields before an exchange");
  }
  halo->field_count_agreed = true;
  return ex;
}

void register_field(tessera_halo_t* halo, Tensor view, int* index) {
  HaloExchange& ex = capi::exchange_of(halo);
  if (ex.in_flight()) throw InvalidArgument("cannot register a field while an exchange is in flight");
  capi::check_padded(ex, view, field_label(halo));
  halo->fields.push_back(std::move(view));
  if (index != nullptr) *index = static_cast<int>(halo->fields.size()) - 1;
}

}  // namespace

extern "C" {

int tessera_halo_create(const tessera_decomp_t* decomp, int lat_before, int lat_after, int lon_before, int lon_after,
                        int periodic_lon, tessera_pole_t pole, tessera_halo_t** halo) {
  return guarded("tessera_halo_create", [&] {
    require(halo, "the output handle pointer");
    *halo = nullptr;
    const domain::Decomposition& d = capi::decomposition_of(decomp);
    for (int w : {lat_before, lat_after, lon_before, lon_after}) {
      if (w < 0) throw InvalidArgument("halo width " + std::to_string(w) + " is negative");
    }
    HaloSpec spec;
    spec.width = {lat_before, lat_after, lon_before, lon_after};
    spec.periodic_lon = periodic_lon != 0;
    spec.pole = to_pole(pole);
    auto handle = std::make_unique<tessera_halo>();
    handle->decomp = decomp->state;
    handle->exchange.emplace(d, spec);
    *halo = handle.release();
  });
}

int tessera_halo_destroy(tessera_halo_t** halo) {
  return guarded("tessera_halo_destroy", [&] {
    require(halo, "the pointer to the halo handle");
    std::unique_ptr<tessera_halo> owned(*halo);
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
    register_field(halo, std::move(view), index);
  });
}

int tessera_halo_add_field_strided(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, int ndim,
                                   const int64_t* shape, const int64_t* strides, int* index) {
  return guarded("tessera_halo_add_field_strided", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);  // even if the registration fails below
    const std::string what = field_label(halo);
    const Shape s = capi::declared_shape(data, dtype, TESSERA_ORDER_C, ndim, shape, what);
    if (ndim < 2) throw InvalidArgument(what + ": a field needs the two dims lat and lon");
    require(strides, "the strides pointer");
    const Shape st(strides, strides + ndim);
    for (std::int64_t x : st) {
      if (x < 1) throw InvalidArgument(what + ": stride " + std::to_string(x) + " is not positive");
    }
    register_field(halo, capi::caller_view(data, capi::to_dtype(dtype, what), s, st, what), index);
  });
}

int tessera_halo_clear_fields(tessera_halo_t* halo) {
  return guarded("tessera_halo_clear_fields", [&] {
    capi::exchange_of(halo);
    forget_agreed_count(halo);
    if (capi::exchange_of(halo).in_flight()) {
      throw InvalidArgument("cannot clear the fields while an exchange is in flight");
    }
    halo->fields.clear();
    halo->vector_components.clear();
  });
}

int tessera_halo_num_fields(const tessera_halo_t* halo, int* count) {
  return guarded("tessera_halo_num_fields", [&] {
    capi::exchange_of(halo);
    *require(count, "count") = static_cast<int>(halo->fields.size());
  });
}

namespace {

// The vector components' sign flip across the poles (tessera_halo_set_vector_pair).
void flip_vector_components(tessera_halo_t* halo) {
  for (int index : halo->vector_components) {
    capi::exchange_of(halo).flip_beyond_poles(halo->fields[static_cast<std::size_t>(index)]);
  }
}

}  // namespace

int tessera_halo_set_vector_pair(tessera_halo_t* halo, int u_index, int v_index) {
  return guarded("tessera_halo_set_vector_pair", [&] {
    capi::exchange_of(halo);
    const int n = static_cast<int>(halo->fields.size());
    for (int index : {u_index, v_index}) {
      if (index < 0 || index >= n) {
        throw InvalidArgument("field index " + std::to_string(index) + " is not one of the " + std::to_string(n) +
                              " registered fields [0, " + std::to_string(n) + ")");
      }
    }
    if (u_index == v_index) throw InvalidArgument("u and v are the same field (" + std::to_string(u_index) + ")");
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
    agreed_exchange(halo).exchange(halo->fields);
    flip_vector_components(halo);
  });
}

int tessera_halo_start(tessera_halo_t* halo) {
  return guarded("tessera_halo_start", [&] { agreed_exchange(halo).start(halo->fields); });
}

int tessera_halo_finish(tessera_halo_t* halo) {
  return guarded("tessera_halo_finish", [&] {
    capi::exchange_of(halo).finish();
    flip_vector_components(halo);
  });
}

int tessera_halo_exchange_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_exchange_adjoint", [&] {
    HaloExchange& ex = agreed_exchange(halo);
    flip_vector_components(halo);
    ex.exchange_adjoint(halo->fields);
  });
}

int tessera_halo_start_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_start_adjoint", [&] {
    HaloExchange& ex = agreed_exchange(halo);
    flip_vector_components(halo);
    ex.start_adjoint(halo->fields);
  });
}

int tessera_halo_finish_adjoint(tessera_halo_t* halo) {
  return guarded("tessera_halo_finish_adjoint", [&] { capi::exchange_of(halo).finish_adjoint(); });
}

int tessera_halo_in_flight(const tessera_halo_t* halo, int* in_flight) {
  return guarded("tessera_halo_in_flight",
                 [&] { *require(in_flight, "in_flight") = capi::exchange_of(halo).in_flight() ? 1 : 0; });
}

int tessera_halo_gather(const tessera_halo_t* halo, const void* field, void* global, tessera_dtype_t dtype,
                        tessera_order_t order, int ndim, const int64_t* shape, int root) {
  return guarded("tessera_halo_gather", [&] {
    const HaloExchange& ex = capi::exchange_of(halo);
    capi::scatter_gather(ex.decomposition(), true, global, const_cast<void*>(field), dtype, order, ndim, shape, root,
                         [&](Tensor t) {
                           capi::check_padded(ex, t, "gather: the field");
                           return ex.interior(t);
                         },
                         "gather");
  });
}

int tessera_halo_scatter(const tessera_halo_t* halo, const void* global, void* field, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, int root) {
  return guarded("tessera_halo_scatter", [&] {
    const HaloExchange& ex = capi::exchange_of(halo);
    capi::scatter_gather(ex.decomposition(), false, global, field, dtype, order, ndim, shape, root,
                         [&](Tensor t) {
                           capi::check_padded(ex, t, "scatter: the field");
                           return ex.interior(t);
                         },
                         "scatter");
  });
}

}  // extern "C"
