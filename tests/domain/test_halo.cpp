// Decomposition and HaloExchange: every cell of every field holds a value encoding its
// global coordinates, and every halo cell is checked against the rule it must follow
// (owner's value, periodic wrap, pole policy, zero) at every domain size the test runs
// with (1, 2, 3, 4 ranks; uneven lat/lon splits) and on 1-D, lon-only and 2x2 grids.
// The adjoint is checked with the dot-product identity, start()/finish() against
// exchange(), several dtypes in one exchange, and the errors of the issue.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"

using namespace tessera;
using namespace tessera::domain;
using namespace tessera::testing;  // world(), grids(), encode(), the halo rule, world_rank(), world_size()

namespace {

struct Case {
  Shape shape;
  HaloWidths width;
  bool periodic;
  PolePolicy pole;
};

std::string describe(const Case& c, const ProcessGrid& g) {
  return shape_str(c.shape) + " on " + g.str() + " halo " + c.width.str() + (c.periodic ? " periodic " : " bounded ") +
         std::string(pole_policy_name(c.pole));
}

std::vector<Case> coordinate_cases() {
  std::vector<Case> cases;
  const std::vector<std::pair<Shape, std::vector<HaloWidths>>> geometries = {
      {{2, 7, 8}, {HaloWidths::uniform(1), {1, 0, 2, 1}}},  // 7 latitudes: 2,2,2,1 over 4
      {{13, 12}, {{2, 3, 2, 3}}},                             // no leading dims, wide halos
      {{1, 721, 4}, {HaloWidths::uniform(1)}},                // the ERA5-like odd count
  };
  for (const auto& [shape, widths] : geometries)
    for (const HaloWidths& w : widths) {
      for (PolePolicy pole :
           {PolePolicy::zero, PolePolicy::replicate, PolePolicy::across_pole, PolePolicy::across_pole_point})
        cases.push_back({shape, w, true, pole});
      for (PolePolicy pole : {PolePolicy::zero, PolePolicy::replicate}) cases.push_back({shape, w, false, pole});
    }
  return cases;
}

TEST(Decomposition, BoxesFollowShardRange) {
  for (const ProcessGrid& g : grids()) {
    Decomposition d(world(), {3, 721, 10}, g);
    std::int64_t cells = 0;
    for (int r = 0; r < d.size(); ++r) {
      const GridCoords c = d.coords_of(r);
      EXPECT_EQ(d.rank_of(c), r);
      EXPECT_EQ(c.lat, r / g.lon);
      EXPECT_EQ(c.lon, r % g.lon);
      EXPECT_EQ(d.box_of(r).lat, shard_range(721, g.lat, c.lat));
      EXPECT_EQ(d.box_of(r).lon, shard_range(10, g.lon, c.lon));
      cells += d.box_of(r).lat.length * d.box_of(r).lon.length;
    }
    EXPECT_EQ(cells, 721 * 10);
    EXPECT_EQ(d.local_shape(), (Shape{3, d.box().lat.length, d.box().lon.length}));
    EXPECT_EQ(d.leading_shape(), Shape{3});
  }
}

// Regression (hardening issue): a grid whose lat * lon overflows int was undefined
// behaviour, and a global shape whose element count overflows int64 went on to
// out-of-bounds arithmetic. Both are now errors naming the decomposition.
TEST(Decomposition, OverflowingGridAndShapeAreRejected) {
  try {
    Decomposition d(world(), {4, 4}, ProcessGrid{std::numeric_limits<int>::max(), 2});
    ADD_FAILURE() << "an overflowing grid was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the process grid must hold exactly"), std::string::npos) << e.what();
  }
  const std::int64_t huge = std::int64_t{1} << 40;
  try {
    Decomposition d(world(), {huge, huge, 64});
    ADD_FAILURE() << "an uncountable global shape was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("more elements than int64 can count"), std::string::npos) << e.what();
  }
}

TEST(Decomposition, OverTheMeshDomainCommunicator) {
  // All ranks in the domain dim: the mesh's domain communicator is the whole world.
  Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::none, 1, world_size()});
  Decomposition d(mesh, {2, 721, 8});
  EXPECT_EQ(d.grid(), (ProcessGrid{world_size(), 1}));
  EXPECT_EQ(d.rank(), mesh.rank(MeshDim::domain));
  EXPECT_EQ(d.box().lat, shard_range(721, world_size(), mesh.rank(MeshDim::domain)));
  if (world_size() == 4) EXPECT_EQ(Decomposition(mesh, {721, 8}, {2, 2}).box().lon, shard_range(8, 2, d.rank() % 2));
}

TEST(Decomposition, ScatterGatherRoundTrip) {
  for (const ProcessGrid& g : grids()) {
    Decomposition d(world(), {2, 7, 6}, g);
    Tensor global;
    if (d.rank() == 0) {
      global = Tensor::empty({2, 7, 6}, DType::f64);
      auto* p = global.data<double>();
      for (std::int64_t l = 0; l < 2; ++l)
        for (std::int64_t i = 0; i < 7; ++i)
          for (std::int64_t j = 0; j < 6; ++j) p[(l * 7 + i) * 6 + j] = encode(l, i, j);
    }
    Tensor local = d.scatter(global, DType::f64, 0);
    const LocalBox box = d.box();
    ASSERT_EQ(local.shape(), d.local_shape());
    const auto v = local.to_vector<double>();
    for (std::int64_t l = 0, k = 0; l < 2; ++l)
      for (std::int64_t i = box.lat.start; i < box.lat.end(); ++i)
        for (std::int64_t j = box.lon.start; j < box.lon.end(); ++j, ++k)
          ASSERT_EQ(v[k], encode(l, i, j)) << g.str() << " rank " << d.rank();
    const int root = d.size() - 1;
    Tensor back = d.gather(local, root);
    if (d.rank() == root) {
      ASSERT_TRUE(back.defined());
      const auto b = back.to_vector<double>();
      for (std::int64_t l = 0, k = 0; l < 2; ++l)
        for (std::int64_t i = 0; i < 7; ++i)
          for (std::int64_t j = 0; j < 6; ++j, ++k) ASSERT_EQ(b[k], encode(l, i, j)) << g.str();
    } else {
      EXPECT_FALSE(back.defined());
    }
  }
}

TEST(HaloExchange, EveryHaloCellHoldsItsSourceCoordinates) {
  std::int64_t checked = 0;
  int cases = 0;
  for (const ProcessGrid& g : grids())
    for (const Case& c : coordinate_cases()) {
      Decomposition d(world(), c.shape, g);
      HaloExchange ex(d, {c.width, c.periodic, c.pole});
      Tensor field = ex.allocate(DType::f64, d.leading_shape());
      fill_coordinates(ex, field);
      ex.exchange(field);
      const std::string bad = check_coordinates(ex, field, &checked);
      EXPECT_TRUE(bad.empty()) << describe(c, g) << ":" << bad;
      // A plan runs many times: a second exchange over stale halos gives the same.
      fill_coordinates(ex, field);
      ex.exchange(field);
      EXPECT_TRUE(check_coordinates(ex, field, &checked).empty()) << describe(c, g) << " (second run)";
      ++cases;
    }
  EXPECT_GT(checked, 0);
  if (world_rank() == 0) std::printf("[ coords ] %d cases, %lld cells checked on rank 0\n", cases, (long long)checked);
}

TEST(HaloExchange, CornersComeFromTheDiagonalRank) {
  // On a 2x2 grid with periodic lon, every corner of every rank is owned by the
  // diagonal rank; check the plan needs exactly the 8 neighbour slots (or fewer).
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks for a 2x2 grid";
  Decomposition d(world(), {9, 10}, {2, 2});
  HaloExchange ex(d, {HaloWidths::uniform(2), true, PolePolicy::zero});
  Tensor field = ex.allocate(DType::f64, {});
  fill_coordinates(ex, field);
  ex.exchange(field);
  std::int64_t checked = 0;
  EXPECT_EQ(check_coordinates(ex, field, &checked), "");
  // Rows toward the pole are zero, the rest of the 8 slots are real messages: the
  // lon neighbour is the same rank east and west (2 ranks on the circle), told apart by tag.
  EXPECT_EQ(ex.stats().send_messages, 5);
  EXPECT_EQ(ex.stats().recv_messages, 5);
}

TEST(HaloExchange, AdjointSatisfiesDotProductIdentity) {
  std::mt19937_64 rng(1234 + world_rank());
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (const ProcessGrid& g : grids())
    for (PolePolicy pole :
         {PolePolicy::zero, PolePolicy::replicate, PolePolicy::across_pole, PolePolicy::across_pole_point})
      for (bool periodic : {true, false}) {
        if (mirrors_across_pole(pole) && !periodic) continue;
        Decomposition d(world(), {2, 13, 12}, g);
        HaloExchange ex(d, {{2, 1, 3, 2}, periodic, pole});
        Tensor x = ex.allocate(DType::f64, {2});
        Tensor y = ex.allocate(DType::f64, {2});
        for (Tensor* t : {&x, &y}) {
          auto* p = t->data<double>();
          for (std::int64_t k = 0; k < t->numel(); ++k) p[k] = uni(rng);
        }
        Tensor ax = x.clone();
        ex.exchange(ax);
        Tensor aty = y.clone();
        ex.exchange_adjoint(aty);
        double sums[2] = {0, 0};
        const auto vax = ax.to_vector<double>(), vy = y.to_vector<double>();
        const auto vx = x.to_vector<double>(), vaty = aty.to_vector<double>();
        for (std::size_t k = 0; k < vax.size(); ++k) {
          sums[0] += vax[k] * vy[k];
          sums[1] += vx[k] * vaty[k];
        }
        MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        EXPECT_NEAR(sums[0], sums[1], 1e-12 * std::max(1.0, std::abs(sums[0])))
            << g.str() << " " << pole_policy_name(pole) << (periodic ? " periodic" : " bounded");
        // The transpose leaves the halo zero.
        Tensor interior = ex.interior(aty);
        const double total = [&] {
          double s = 0;
          for (double v : vaty) s += std::abs(v);
          return s;
        }();
        double inside = 0;
        for (double v : interior.contiguous().to_vector<double>()) inside += std::abs(v);
        EXPECT_DOUBLE_EQ(total, inside) << "halo not zeroed";
      }
}

TEST(HaloExchange, StartFinishWithWorkBetweenEqualsExchange) {
  std::mt19937_64 rng(99 + world_rank());
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (const ProcessGrid& g : grids()) {
    Decomposition d(world(), {3, 11, 8}, g);
    HaloExchange ex(d, {HaloWidths::uniform(1), true, PolePolicy::across_pole});
    Tensor a = ex.allocate(DType::f64, {3});
    auto* p = a.data<double>();
    for (std::int64_t k = 0; k < a.numel(); ++k) p[k] = uni(rng);
    Tensor b = a.clone();
    ex.exchange(a);

    ex.start({b});
    EXPECT_TRUE(ex.in_flight());
    // Interior work while the messages travel: a 5-point sum over the inner interior.
    const Tensor inner = ex.interior(b).contiguous();
    double work = 0;
    for (double v : inner.to_vector<double>()) work += v * v;
    ex.finish();
    EXPECT_FALSE(ex.in_flight());
    EXPECT_GT(work, 0.0);
    EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << g.str();

    Tensor c = a.clone(), e = a.clone();
    ex.exchange_adjoint(c);
    ex.start_adjoint({e});
    work = 0;
    for (double v : ex.interior(a).contiguous().to_vector<double>()) work += v;
    ex.finish_adjoint();
    EXPECT_EQ(c.to_vector<double>(), e.to_vector<double>()) << g.str();
    // Misuse: finish without start.
    EXPECT_THROW(ex.finish(), InvalidArgument);
  }
}

TEST(HaloExchange, SeveralDtypesInOneExchange) {
  for (const ProcessGrid& g : grids()) {
    Decomposition d(world(), {9, 8}, g);
    const HaloSpec spec{{1, 2, 2, 1}, true, PolePolicy::across_pole};
    HaloExchange ex(d, spec);
    const LocalBox box = d.box();
    const HaloWidths w = spec.width;
    // f32 (2 leading), f64 (3 leading), bf16 (none), i64 (2x2 leading), and an f64
    // field in Fortran order (a strided view, as the C/Fortran API will pass).
    Tensor f32 = ex.allocate(DType::f32, {2});
    Tensor f64 = ex.allocate(DType::f64, {3});
    Tensor b16 = ex.allocate(DType::bf16, {});
    Tensor i64 = ex.allocate(DType::i64, {2, 2});
    const Shape fshape = ex.padded_shape({2});
    std::vector<double> fortran_storage(static_cast<std::size_t>(shape_numel(fshape)), -7.0);
    Tensor ftn = Tensor::view(fortran_storage.data(), fshape, DType::f64, Device::host(),
                              {1, fshape[0], fshape[0] * fshape[1]});
    const std::int64_t pl = fshape[1], pn = fshape[2];
    // bf16 holds integers up to 256 exactly: encode (i, j) compactly there.
    auto small = [&](std::int64_t i, std::int64_t j) { return static_cast<double>((i * 8 + j) % 200 + 1); };
    auto fill = [&](auto value_of) {
      for (std::int64_t a = 0; a < pl; ++a)
        for (std::int64_t b = 0; b < pn; ++b) {
          const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
          const bool inside = i >= box.lat.start && i < box.lat.end() && j >= box.lon.start && j < box.lon.end();
          value_of(a, b, i, j, inside);
        }
    };
    fill([&](std::int64_t a, std::int64_t b, std::int64_t i, std::int64_t j, bool inside) {
      for (int l = 0; l < 2; ++l) f32.data<float>()[(l * pl + a) * pn + b] = inside ? float(encode(l, i, j)) : -7.f;
      for (int l = 0; l < 3; ++l) f64.data<double>()[(l * pl + a) * pn + b] = inside ? encode(l, i, j) : -7.0;
      b16.data<bfloat16>()[a * pn + b] = bfloat16(inside ? float(small(i, j)) : -7.f);
      for (int l = 0; l < 4; ++l)
        i64.data<std::int64_t>()[(l * pl + a) * pn + b] = inside ? std::int64_t(encode(l, i, j)) : -7;
      for (int l = 0; l < 2; ++l) fortran_storage[l + 2 * (a + pl * b)] = inside ? encode(l, i, j) : -7.0;
    });
    ex.exchange({f32, f64, b16, i64, ftn});
    int errors = 0;
    fill([&](std::int64_t a, std::int64_t b, std::int64_t i, std::int64_t j, bool) {
      std::int64_t si = 0, sj = 0;
      const bool copy = halo_source(i, j, d.global_lat(), d.global_lon(), spec, si, sj);
      for (int l = 0; l < 2; ++l) errors += f32.data<float>()[(l * pl + a) * pn + b] != (copy ? float(encode(l, si, sj)) : 0.f);
      for (int l = 0; l < 3; ++l) errors += f64.data<double>()[(l * pl + a) * pn + b] != (copy ? encode(l, si, sj) : 0.0);
      errors += float(b16.data<bfloat16>()[a * pn + b]) != (copy ? float(small(si, sj)) : 0.f);
      for (int l = 0; l < 4; ++l)
        errors += i64.data<std::int64_t>()[(l * pl + a) * pn + b] != (copy ? std::int64_t(encode(l, si, sj)) : 0);
      for (int l = 0; l < 2; ++l) errors += fortran_storage[l + 2 * (a + pl * b)] != (copy ? encode(l, si, sj) : 0.0);
    });
    EXPECT_EQ(errors, 0) << g.str();
  }
}

// Runs `body` expecting an InvalidArgument on every rank whose text contains `needle`.
template <class F>
void expect_error(F body, const std::string& needle, const std::string& what) {
  std::string message;
  try {
    body();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(needle), std::string::npos) << what << ": got \"" << message << "\"";
  // The same text on every rank.
  const auto all = tessera::testing::all_gather_strings(message);
  for (const auto& m : all) EXPECT_EQ(m, all[0]) << what;
}

TEST(HaloExchange, TooSmallExtentNamesRankAndExtents) {
  const int p = world_size();
  // 7 latitudes over p ranks. A halo that reaches past its neighbour's rows (without
  // reaching a pole first) cannot be sent from the neighbour's own cells.
  Decomposition d(world(), {7, 8}, {p, 1});
  if (p >= 3) {
    const ShardRange second = d.lat_range(1);
    const int width = static_cast<int>(second.length) + 1;
    const std::string needle = "domain rank 1 owns latitudes [" + std::to_string(second.start) + ", " +
                               std::to_string(second.end()) + ") (" + std::to_string(second.length) +
                               " rows), fewer than the " + std::to_string(width) + " halo rows it must send to domain rank 0";
    expect_error([&] { HaloExchange ex(d, {{0, width, 0, 0}, true, PolePolicy::zero}); }, needle, "lat halo");
  } else if (p == 2) {
    // Across the pole, rank 0 (4 rows) must mirror 5 rows to itself.
    expect_error([&] { HaloExchange ex(d, {{5, 0, 0, 0}, true, PolePolicy::across_pole}); },
                 "domain rank 0 owns latitudes [0, 4) (4 rows), fewer than the 5 across-the-pole halo rows it must "
                 "send to domain rank 0",
                 "across-pole halo");
  } else {
    expect_error([&] { HaloExchange ex(d, {{8, 0, 0, 0}, true, PolePolicy::across_pole}); },
                 "reaches past both poles", "across-pole halo");
  }
  // A halo reaching past the pole through the small polar rank is fine: rank 1 sends
  // its 3 rows, the 4th is pole padding.
  if (p == 2) {
    HaloExchange ex(d, {{0, 4, 0, 0}, true, PolePolicy::zero});
    Tensor field = ex.allocate(DType::f64, {});
    fill_coordinates(ex, field);
    ex.exchange(field);
    std::int64_t checked = 0;
    EXPECT_EQ(check_coordinates(ex, field, &checked), "");
  }
  // Periodic longitude: 8 columns cannot fill a 9-column halo.
  expect_error([&] { HaloExchange ex(d, {{0, 0, 9, 0}, true, PolePolicy::zero}); },
               "domain rank 0 owns longitudes [0, 8) (8 columns), fewer than the 9", "lon halo");
  // Across the pole on an odd circle.
  Decomposition odd(world(), {7, 9}, {p, 1});
  expect_error([&] { HaloExchange ex(odd, {HaloWidths::uniform(1), true, PolePolicy::across_pole}); },
               "even longitude count", "odd nlon");
  // More ranks than latitudes.
  if (p > 1) {
    expect_error([&] { Decomposition bad(world(), {p - 1, 4}); },
                 "domain rank " + std::to_string(p - 1) + " would own 0 of the " + std::to_string(p - 1) + " latitudes",
                 "empty rank");
  }
}

TEST(HaloExchange, FieldErrorOnOneRankThrowsEverywhere) {
  Decomposition d(world(), {7, 8});
  HaloExchange ex(d, {HaloWidths::uniform(1), true, PolePolicy::zero});
  // Rank 0 passes a field with the wrong latitude extent; no rank may hang.
  Tensor field = d.rank() == 0 ? Tensor::zeros({1, 99, 10}, DType::f32) : ex.allocate(DType::f32, {1});
  std::string message;
  try {
    ex.exchange(field);
  } catch (const ShapeError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("on domain rank 0"), std::string::npos) << message;
  EXPECT_FALSE(ex.in_flight());
  // The plan is still usable afterwards.
  Tensor good = ex.allocate(DType::f64, {1});
  fill_coordinates(ex, good);
  ex.exchange(good);
  std::int64_t checked = 0;
  EXPECT_EQ(check_coordinates(ex, good, &checked), "");
}

}  // namespace

// Regression: one rank with no fields and another with one used to hang, because an
// empty field set compared equal to "nothing agreed yet" and skipped the agreement.
TEST(HaloExchange, RanksPassingDifferentFieldCountsFailTogetherInsteadOfHanging) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Decomposition d(world(), {8, 6});
  HaloExchange ex(d, HaloSpec{{1, 1, 1, 1}, true, PolePolicy::zero});
  std::vector<Tensor> fields;
  if (world_rank() == 1) fields.push_back(ex.allocate(DType::f64, {}));
  EXPECT_THROW(ex.exchange(fields), InvalidArgument);
  // The plan stays usable once the ranks agree again.
  std::vector<Tensor> agreed{ex.allocate(DType::f64, {})};
  EXPECT_NO_THROW(ex.exchange(agreed));
}

// Regression (fuzz finding 4, fuzz/findings/fuzz_capi_shapes-halo-width-linear-time):
// planning walked every padded row and column, so a halo of 2^30 rows took minutes to
// plan. Zero rows beyond the poles (and zero columns beyond a non-periodic edge) are now
// one run whatever their width; copied halos that wide are errors at once.
TEST(HaloExchange, HugeWidthsPlanAtOnce) {
  const int huge = 1 << 30;
  const std::int64_t wide = 2 * static_cast<std::int64_t>(huge);
  // Split along longitude: every rank owns all 7 latitudes, its latitude halo is all
  // beyond the poles.
  Decomposition by_lon(world(), {7, 8}, {1, world_size()});
  HaloExchange zero(by_lon, {{huge, huge, 0, 0}, true, PolePolicy::zero});
  EXPECT_EQ(zero.padded_shape({}), (Shape{7 + wide, by_lon.box().lon.length}));
  // Split along latitude: every rank owns all 8 longitudes, its non-periodic longitude
  // halo is all beyond the edges.
  Decomposition by_lat(world(), {7, 8}, {world_size(), 1});
  HaloExchange edges(by_lat, {{0, 0, huge, huge}, false, PolePolicy::zero});
  EXPECT_EQ(edges.padded_shape({}), (Shape{by_lat.box().lat.length, 8 + wide}));
  expect_error([&] { HaloExchange ex(by_lat, {{0, 0, huge, 0}, true, PolePolicy::zero}); },
               "a periodic longitude halo of 1073741824 columns wraps around the whole 8-longitude ring", "huge lon");
  expect_error([&] { HaloExchange ex(by_lon, {{huge, 0, 0, 0}, true, PolePolicy::replicate}); },
               "a latitude halo of 1073741824 rows reaches past both poles of a 7-latitude grid", "huge lat");
}

// Vector pairs: under the mirroring policies every halo cell beyond a pole holds the
// mirrored cell's value negated (u and v both reverse across the pole), every other halo
// cell the plain rule's value; with other policies exchange_vector is exchange({u, v}).
// The adjoint is the transpose (dot-product identity).
TEST(HaloExchange, VectorPairsFlipSignAcrossThePole) {
  for (const ProcessGrid& g : grids())
    for (PolePolicy pole : {PolePolicy::across_pole, PolePolicy::across_pole_point, PolePolicy::replicate}) {
      Decomposition d(world(), {2, 13, 12}, g);
      HaloExchange ex(d, {{2, 1, 1, 2}, true, pole});
      Tensor u = ex.allocate(DType::f64, {2}), v = ex.allocate(DType::f64, {2});
      fill_coordinates(ex, u);
      fill_coordinates(ex, v);
      ex.exchange_vector(u, v);
      const LocalBox box = d.box();
      const HaloWidths w = ex.spec().width;
      const std::int64_t pl = u.size(1), pn = u.size(2);
      int errors = 0;
      for (const Tensor* t : {&u, &v})
        for (std::int64_t l = 0; l < 2; ++l)
          for (std::int64_t a = 0; a < pl; ++a)
            for (std::int64_t b = 0; b < pn; ++b) {
              const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
              const bool beyond = i < 0 || i >= d.global_lat();
              const double sign = beyond && mirrors_across_pole(pole) ? -1.0 : 1.0;
              const double want = sign * expected_halo_value(l, i, j, d.global_lat(), d.global_lon(), ex.spec());
              if (t->data<double>()[(l * pl + a) * pn + b] != want) ++errors;
            }
      EXPECT_EQ(errors, 0) << g.str() << " " << pole_policy_name(pole);
      // The transpose.
      std::mt19937_64 rng(99 + world_rank());
      std::uniform_real_distribution<double> uni(-1.0, 1.0);
      Tensor xu = ex.allocate(DType::f64, {2}), xv = ex.allocate(DType::f64, {2});
      Tensor yu = ex.allocate(DType::f64, {2}), yv = ex.allocate(DType::f64, {2});
      for (Tensor* t : {&xu, &xv, &yu, &yv})
        for (std::int64_t k = 0; k < t->numel(); ++k) t->data<double>()[k] = uni(rng);
      Tensor axu = xu.clone(), axv = xv.clone(), atyu = yu.clone(), atyv = yv.clone();
      ex.exchange_vector(axu, axv);
      ex.exchange_vector_adjoint(atyu, atyv);
      double sums[2] = {0, 0};
      for (std::int64_t k = 0; k < xu.numel(); ++k) {
        sums[0] += axu.data<double>()[k] * yu.data<double>()[k] + axv.data<double>()[k] * yv.data<double>()[k];
        sums[1] += xu.data<double>()[k] * atyu.data<double>()[k] + xv.data<double>()[k] * atyv.data<double>()[k];
      }
      MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_NEAR(sums[0], sums[1], 1e-12 * std::max(1.0, std::abs(sums[0]))) << g.str() << " " << pole_policy_name(pole);
    }
}
