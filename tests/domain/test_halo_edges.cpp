// Edge policies per edge (issue 41): periodic latitude, `none` (the halo beyond the edge
// left exactly as the caller wrote it), replicate, mirror_even and mirror_odd, on every
// process grid of this world size; each halo cell against a rule written here from the
// spec alone, the adjoint against the forward (<A x, y> = <x, A^T y>), and the
// contradictions refused on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "domain_test_support.hpp"
#include "expect_error.hpp"
#include "tessera/error.hpp"

namespace tessera::testing {
namespace {

using domain::Decomposition;
using domain::EdgePolicy;
using domain::HaloExchange;
using domain::HaloSpec;
using domain::LocalBox;

constexpr double kSentinel = -7.0;  // what fill_coordinates writes into the halo

// The value global cell (i, j) holds after the exchange: encode() of its source times
// the sign, 0, or the sentinel where an edge is left alone. Longitude wraps or not by the
// west/east policy (these specs set all four edges).
double expected(std::int64_t lead, std::int64_t i, std::int64_t j, std::int64_t n, std::int64_t m,
                const HaloSpec& spec) {
  double sign = 1.0;
  bool zero = false;
  std::int64_t si = i, sj = j;
  if (i < 0 || i >= n) {
    const bool low = i < 0;
    switch (low ? spec.north : spec.south) {
      case EdgePolicy::none: return kSentinel;
      case EdgePolicy::zero: zero = true; break;
      case EdgePolicy::replicate: si = low ? 0 : n - 1; break;
      case EdgePolicy::periodic: si = ((i % n) + n) % n; break;
      case EdgePolicy::mirror_odd: sign = -1.0; [[fallthrough]];
      case EdgePolicy::mirror_even: si = low ? -1 - i : 2 * n - 1 - i; break;
      case EdgePolicy::from_spec: ADD_FAILURE() << "the test specs set every edge"; break;
    }
  }
  if (j < 0 || j >= m) {
    switch (j < 0 ? spec.west : spec.east) {
      case EdgePolicy::none: return kSentinel;
      case EdgePolicy::periodic: sj = ((j % m) + m) % m; break;
      default: zero = true; break;
    }
  }
  return zero ? 0.0 : sign * encode(lead, si, sj);
}

std::string check(const HaloExchange& ex, const Tensor& field) {
  const Decomposition& d = ex.decomposition();
  const std::string bad = check_cells(ex, field, [&](std::int64_t l, std::int64_t i, std::int64_t j) {
    return expected(l, i, j, d.global_lat(), d.global_lon(), ex.spec());
  });
  return bad.empty() ? bad : bad + " (" + ex.spec().str() + ", " + d.str() + ")";
}

HaloSpec edges(int width, EdgePolicy north, EdgePolicy south, EdgePolicy west, EdgePolicy east) {
  HaloSpec spec;
  spec.width = domain::HaloWidths::uniform(width);
  spec.north = north;
  spec.south = south;
  spec.west = west;
  spec.east = east;
  return spec;
}

// Walls (none: the model's own rows), a wall for scalars and one for the normal
// velocity, a doubly periodic domain, a regional grid, replicate against zero.
std::vector<HaloSpec> specs() {
  using E = EdgePolicy;
  return {edges(1, E::none, E::none, E::periodic, E::periodic),
          edges(2, E::mirror_even, E::mirror_odd, E::periodic, E::periodic),
          edges(2, E::periodic, E::periodic, E::periodic, E::periodic),
          edges(1, E::none, E::mirror_odd, E::none, E::zero),
          edges(1, E::replicate, E::zero, E::zero, E::none)};
}

TEST(HaloEdges, EveryHaloCellFollowsItsEdgesPolicy) {
  for (const domain::ProcessGrid& grid : grids()) {
    const Decomposition d(world(), {2, 9, 10}, grid);
    for (const HaloSpec& spec : specs()) {
      HaloExchange ex(d, spec);
      Tensor field = ex.allocate(DType::f64, {2});
      fill_coordinates(ex, field);
      ex.exchange(field);
      EXPECT_EQ(check(ex, field), "");
      // A second exchange (buffers reused) gives the same halos.
      ex.exchange(field);
      EXPECT_EQ(check(ex, field), "");
    }
  }
}

// Sum over all ranks of the padded fields' dot product.
double global_dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double local = 0.0, total = 0.0;
  for (std::size_t k = 0; k < x.size(); ++k) local += x[k] * y[k];
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

TEST(HaloEdges, TheAdjointIsTheTransposeOfTheForwardExchange) {
  std::mt19937 gen(17 + world_rank());
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (const domain::ProcessGrid& grid : grids()) {
    const Decomposition d(world(), {8, 9}, grid);
    for (const HaloSpec& spec : specs()) {
      HaloExchange ex(d, spec);
      Tensor x = ex.allocate(DType::f64, {}), y = ex.allocate(DType::f64, {});
      for (Tensor* t : {&x, &y}) {
        double* p = t->data<double>();
        for (std::int64_t k = 0; k < t->numel(); ++k) p[k] = uniform(gen);
      }
      Tensor ax = x.clone(), aty = y.clone();
      ex.exchange(ax);
      ex.exchange_adjoint(aty);
      const double lhs = global_dot(ax, y), rhs = global_dot(x, aty);
      EXPECT_NEAR(lhs, rhs, 1e-12 * (std::abs(lhs) + 1.0)) << spec.str() << " on " << grid.str();
    }
  }
}

TEST(HaloEdges, ContradictoryEdgesAreRefusedOnEveryRank) {
  const Decomposition d(world(), {8, 10});
  using E = EdgePolicy;
  expect_error<InvalidArgument>([&] { HaloExchange ex(d, edges(1, E::periodic, E::zero, E::periodic, E::periodic)); },
                                {"north is periodic and south zero", "must be periodic too"});
  expect_error<InvalidArgument>([&] { HaloExchange ex(d, edges(1, E::zero, E::zero, E::mirror_even, E::zero)); },
                                {"mirror_even on the west edge is not supported"});
  // A Cartesian communicator knows the code's periodicity: a halo that contradicts it is
  // a mistake in one of the two.
  MPI_Comm cart;
  int dims[2] = {world_size(), 1}, periods[2] = {0, 0};
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  {
    Communicator comm(cart);
    const Decomposition cd = Decomposition::from_cartesian(comm, {8, 10}, domain::CartesianOrder::lat_lon);
    HaloSpec periodic;
    periodic.width = domain::HaloWidths::uniform(1);
    expect_error<InvalidArgument>([&] { HaloExchange ex(cd, periodic); },
                                  {"longitude edges are periodic", "Cartesian communicator says longitude is not periodic"});
    periodic.periodic_lon = false;
    EXPECT_NO_THROW(HaloExchange ex(cd, periodic));
  }
  MPI_Comm_free(&cart);
}

}  // namespace
}  // namespace tessera::testing
