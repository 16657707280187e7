// Vector fields: two components exchanged together and, where a pole policy mirrors
// rows across the pole, their halo rows beyond it negated (a vector carried across the
// pole points the other way); the same for a C-grid pair on two plans, and the
// transposes. The exchanges themselves are HaloExchange's (halo_exchange.cpp).

#include <string>

#include "tessera/agree.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/ops.hpp"

namespace tessera::domain {

namespace {

void require_vector_components(const Tensor& u, const Tensor& v) {
  for (const Tensor* t : {&u, &v}) {
    if (t->defined() && t->dtype() == DType::i64) {
      throw InvalidArgument(std::string("HaloExchange::exchange_vector: component ") + (t == &u ? "u" : "v") +
                            " is i64; a vector field is f32, f64 or bf16");
    }
  }
}

void require_same_grid(const HaloExchange& u_plan, const HaloExchange& v_plan) {
  const Decomposition& du = u_plan.decomposition();
  const Decomposition& dv = v_plan.decomposition();
  if (&u_plan == &v_plan || &du.comm() != &dv.comm() || du.grid() != dv.grid() ||
      du.global_lon() != dv.global_lon() || du.leading_shape() != dv.leading_shape() ||
      u_plan.spec().str() != v_plan.spec().str()) {
    throw InvalidArgument("exchange_vector: u's plan (" + du.str() + ") and v's plan (" + dv.str() +
                          ") must be two plans of one grid, communicator and pole policy");
  }
}

}  // namespace

void HaloExchange::flip_beyond_poles(const Tensor& field) const {
  // Only an edge that takes the spec's pole policy mirrors across a pole.
  const bool north = spec().north == EdgePolicy::from_spec && mirrors_across_pole(spec().pole);
  const bool south = spec().south == EdgePolicy::from_spec && mirrors_across_pole(spec().pole);
  if (!north && !south) return;
  const Decomposition& d = decomposition();
  const HaloWidths& w = spec().width;
  const LocalBox box = d.box();
  // A field with the wrong shape is left alone: the exchange reports it, agreed.
  if (!field.defined() || field.dim() < 2 || field.dtype() == DType::i64 ||
      field.shape() != padded_shape(Shape(field.shape().begin(), field.shape().end() - 2))) {
    return;
  }
  const int lat_dim = field.dim() - 2;
  const auto negate_rows = [&](std::int64_t first, std::int64_t count) {
    if (count <= 0) return;
    Tensor rows = field.narrow(lat_dim, first, count);
    Tensor negated = rows.contiguous().clone();
    tessera::ops::scale(negated, -1.0);
    rows.copy_from(negated);
  };
  if (north && box.lat.start == 0) negate_rows(0, w.lat_before);
  if (south && box.lat.end() == d.global_lat()) negate_rows(w.lat_before + box.lat.length, w.lat_after);
}

void HaloExchange::exchange_vector(const Tensor& u, const Tensor& v) {
  // Agreed, so that an i64 component on one rank fails every rank.
  agree_on_success(decomposition().comm().mpi_comm(), [&] { require_vector_components(u, v); });
  exchange(std::vector<Tensor>{u, v});
  flip_beyond_poles(u);
  flip_beyond_poles(v);
}

void HaloExchange::exchange_vector_adjoint(const Tensor& u, const Tensor& v) {
  agree_on_success(decomposition().comm().mpi_comm(), [&] { require_vector_components(u, v); });
  flip_beyond_poles(u);
  flip_beyond_poles(v);
  exchange_adjoint(std::vector<Tensor>{u, v});
}

// The two plans' messages travel together (both started before either is waited for);
// both ranks start them in the order u, v, so MPI's non-overtaking rule keeps them apart.
void exchange_vector(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v) {
  agree_on_success(u_plan.decomposition().comm().mpi_comm(), [&] {
    require_same_grid(u_plan, v_plan);
    require_vector_components(u, v);
  });
  u_plan.start({u});
  v_plan.start({v});
  u_plan.finish();
  v_plan.finish();
  u_plan.flip_beyond_poles(u);
  v_plan.flip_beyond_poles(v);
}

void exchange_vector_adjoint(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v) {
  agree_on_success(u_plan.decomposition().comm().mpi_comm(), [&] {
    require_same_grid(u_plan, v_plan);
    require_vector_components(u, v);
  });
  u_plan.flip_beyond_poles(u);
  v_plan.flip_beyond_poles(v);
  u_plan.start_adjoint({u});
  v_plan.start_adjoint({v});
  u_plan.finish_adjoint();
  v_plan.finish_adjoint();
}

}  // namespace tessera::domain
