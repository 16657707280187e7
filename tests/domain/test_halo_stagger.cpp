// C-grid staggering: fields on the east faces (lon_face) and on the latitude faces
// (lat_face) of a decomposed grid. Every halo cell of every staggered field is checked
// against a serial reference computed from the faces' positions on the sphere (not from
// the planner's index rules), after a scatter of the serial field, at 1-4 ranks on
// latitude bands, longitude bands and 2x2, for every pole policy, f32 and f64; the
// gather returns the serial field; the C-grid vector pair negates beyond the poles;
// the adjoint passes the dot-product identity.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <sstream>

#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/error.hpp"

using namespace tessera;
using namespace tessera::domain;
using namespace tessera::testing;  // world(), grids(), encode(), world_rank(), world_size()

namespace {

// Positions in half-cell units. Latitude from the north pole (0) to the south pole (S):
// rows bounded by the poles are centred at 2i + 1 (S = 2 nlat) and their faces lie at 2f;
// pole-point rows lie at 2i (S = 2 (nlat - 1)) and their faces at 2f + 1. Longitude:
// cell centres at 2j + 1, east faces at 2j + 2, the circle is 2 nlon long.
struct Geometry {
  std::int64_t nlat, nlon;
  bool pole_points;
  Stagger stagger;

  std::int64_t south() const { return pole_points ? 2 * (nlat - 1) : 2 * nlat; }
  std::int64_t lat_count() const {
    if (stagger != Stagger::lat_face) return nlat;
    return pole_points ? nlat - 1 : nlat + 1;
  }
  bool lat_on_half(bool face) const { return face == pole_points; }  // at odd positions
  std::int64_t lat_position(std::int64_t i) const {
    const bool face = stagger == Stagger::lat_face;
    return 2 * i + (lat_on_half(face) ? 1 : 0);
  }
  std::int64_t lat_index(std::int64_t p) const {
    const bool face = stagger == Stagger::lat_face;
    return lat_on_half(face) ? (p - 1) / 2 : p / 2;
  }
  std::int64_t lon_position(std::int64_t j) const { return 2 * j + (stagger == Stagger::lon_face ? 2 : 1); }
  std::int64_t lon_index(std::int64_t q) const {
    q = ((q % (2 * nlon)) + 2 * nlon) % (2 * nlon);
    return stagger == Stagger::lon_face ? ((q - 2 + 2 * nlon) % (2 * nlon)) / 2 : (q - 1) / 2;
  }
};

// The serial reference of halo cell (i, j) of a field holding encode(lead, ., .) on its
// own indices; `beyond` tells whether the cell lies beyond a pole.
double reference(const Geometry& g, const HaloSpec& spec, std::int64_t lead, std::int64_t i, std::int64_t j,
                 bool& beyond) {
  std::int64_t p = g.lat_position(i), q = g.lon_position(j);
  beyond = p < 0 || p > g.south();
  std::int64_t si = i;
  if (beyond) {
    switch (spec.pole) {
      case PolePolicy::zero: return 0.0;
      case PolePolicy::replicate: si = p < 0 ? 0 : g.lat_count() - 1; break;
      case PolePolicy::across_pole:
      case PolePolicy::across_pole_point:
        p = p < 0 ? -p : 2 * g.south() - p;  // mirrored about the pole
        q += g.nlon;                          // half the circle round
        si = g.lat_index(p);
        break;
    }
  }
  if (!spec.periodic_lon && (q < g.lon_position(0) || q > g.lon_position(g.nlon - 1))) return 0.0;
  return encode(lead, si, g.lon_index(q));
}

template <typename T>
Tensor serial_field(const Geometry& g, std::int64_t leading) {
  std::vector<T> values;
  for (std::int64_t l = 0; l < leading; ++l)
    for (std::int64_t i = 0; i < g.lat_count(); ++i)
      for (std::int64_t j = 0; j < g.nlon; ++j) values.push_back(static_cast<T>(encode(l, i, j)));
  return Tensor::from_vector<T>(values, {leading, g.lat_count(), g.nlon});
}

template <typename T>
std::string check_halo(const HaloExchange& ex, const Geometry& g, const Tensor& field, double flip,
                       std::int64_t& checked) {
  const Decomposition& d = ex.decomposition();
  const LocalBox box = d.box();
  const HaloWidths w = ex.spec().width;
  const std::int64_t pl = field.size(1), pn = field.size(2);
  const std::vector<T> got = field.to_vector<T>();
  std::ostringstream bad;
  int errors = 0;
  for (std::int64_t l = 0; l < field.size(0); ++l)
    for (std::int64_t a = 0; a < pl; ++a)
      for (std::int64_t b = 0; b < pn; ++b) {
        const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
        bool beyond = false;
        double want = reference(g, ex.spec(), l, i, j, beyond);
        if (beyond) want *= flip;
        ++checked;
        if (static_cast<double>(got[(l * pl + a) * pn + b]) != want && errors++ < 5) {
          bad << " [rank " << d.rank() << " lead " << l << " " << stagger_name(g.stagger) << " (" << i << ", "
              << j << "): got " << got[(l * pl + a) * pn + b] << " want " << want << "]";
        }
      }
  if (errors) bad << " (" << errors << " wrong)";
  return bad.str();
}

struct Case {
  std::int64_t nlat, nlon;
  HaloWidths width;
  bool periodic;
  PolePolicy pole;
  LatitudeRows rows;
};

std::vector<Case> cases() {
  const HaloWidths w{2, 1, 1, 2};
  return {{13, 12, w, true, PolePolicy::zero, LatitudeRows::cells},
          {13, 12, w, false, PolePolicy::zero, LatitudeRows::pole_points},
          {13, 12, w, true, PolePolicy::replicate, LatitudeRows::cells},
          {13, 12, w, false, PolePolicy::replicate, LatitudeRows::pole_points},
          {13, 12, w, true, PolePolicy::across_pole, LatitudeRows::cells},
          {13, 12, w, true, PolePolicy::across_pole_point, LatitudeRows::pole_points},
          {9, 8, HaloWidths::uniform(1), true, PolePolicy::across_pole_point, LatitudeRows::pole_points}};
}

std::string describe(const Case& c, const ProcessGrid& g, Stagger s, DType dtype) {
  return std::to_string(c.nlat) + "x" + std::to_string(c.nlon) + " on " + g.str() + " " + c.width.str() +
         (c.periodic ? " periodic " : " bounded ") + std::string(pole_policy_name(c.pole)) +
         (c.rows == LatitudeRows::pole_points ? " pole-point rows " : " cell rows ") +
         std::string(stagger_name(s)) + " " + std::string(dtype_name(dtype));
}

template <typename T>
void check_every_halo_cell(DType dtype) {
  std::int64_t checked = 0;
  for (const ProcessGrid& pg : grids())
    for (const Case& c : cases())
      for (Stagger s : {Stagger::none, Stagger::lon_face, Stagger::lat_face}) {
        const Decomposition cells(world(), {2, c.nlat, c.nlon}, pg);
        const Decomposition d = cells.staggered(s, c.rows);
        const Geometry g{c.nlat, c.nlon, c.rows == LatitudeRows::pole_points, s};
        ASSERT_EQ(d.global_lat(), g.lat_count());
        HaloExchange ex(d, {c.width, c.periodic, c.pole});
        const Tensor serial = serial_field<T>(g, 2);
        Tensor field = ex.allocate(dtype, {2});
        Tensor interior = ex.interior(field);
        d.scatter(serial, interior);
        ex.exchange(field);
        EXPECT_EQ(check_halo<T>(ex, g, field, 1.0, checked), "") << describe(c, pg, s, dtype);
        const Tensor gathered = d.gather(ex.interior(field));
        if (world_rank() == 0) {
          EXPECT_EQ(gathered.to_vector<T>(), serial.to_vector<T>()) << describe(c, pg, s, dtype);
        }
      }
  EXPECT_GT(checked, 0);
}

}  // namespace

TEST(Stagger, FacesFollowTheCellBoxes) {
  const int p = world_size();
  const Decomposition cells(world(), {13, 8}, ProcessGrid{p, 1});
  const Decomposition cell_faces = cells.staggered(Stagger::lat_face);
  const Decomposition point_faces = cells.staggered(Stagger::lat_face, LatitudeRows::pole_points);
  const Decomposition east_faces = cells.staggered(Stagger::lon_face);
  EXPECT_EQ(cell_faces.global_shape(), (Shape{14, 8}));
  EXPECT_EQ(point_faces.global_shape(), (Shape{12, 8}));
  EXPECT_EQ(east_faces.global_shape(), (Shape{13, 8}));
  std::int64_t next_cell = 0, next_point = 0;
  for (int q = 0; q < p; ++q) {
    const ShardRange rows = cells.lat_range(q), f = cell_faces.lat_range(q), pf = point_faces.lat_range(q);
    // Each face belongs to the rank owning the row south of it: contiguous, no gap, no overlap.
    EXPECT_EQ(f.start, rows.start);
    EXPECT_EQ(f.end(), q == p - 1 ? rows.end() + 1 : rows.end());
    EXPECT_EQ(pf.start, q == 0 ? 0 : rows.start - 1);
    EXPECT_EQ(pf.end(), rows.end() - 1);
    EXPECT_EQ(f.start, next_cell);
    EXPECT_EQ(pf.start, next_point);
    next_cell = f.end();
    next_point = pf.end();
    for (std::int64_t i = f.start; i < f.end(); ++i) EXPECT_EQ(cell_faces.lat_block_of(i), q);
    for (std::int64_t i = pf.start; i < pf.end(); ++i) EXPECT_EQ(point_faces.lat_block_of(i), q);
    EXPECT_EQ(east_faces.box_of(q), cells.box_of(q));
  }
  EXPECT_EQ(next_cell, 14);
  EXPECT_EQ(next_point, 12);
  EXPECT_THROW((void)Decomposition(world(), {1, 4 * p}, ProcessGrid{1, p}).staggered(Stagger::lat_face,
                                                                                      LatitudeRows::pole_points),
               InvalidArgument);
}

TEST(Stagger, EveryHaloCellMatchesTheSerialReferenceF64) { check_every_halo_cell<double>(DType::f64); }
TEST(Stagger, EveryHaloCellMatchesTheSerialReferenceF32) { check_every_halo_cell<float>(DType::f32); }

// A pole-point grid with one row per rank: the northern band owns no latitude face, and
// its face halo comes from the next band on both sides.
TEST(Stagger, APolarBandOfOneRowOwnsNoFace) {
  const int p = world_size();
  const std::int64_t nlat = p == 1 ? 2 : p;
  const Decomposition cells(world(), {1, nlat, 8}, ProcessGrid{p, 1});
  const Decomposition d = cells.staggered(Stagger::lat_face, LatitudeRows::pole_points);
  const Geometry g{nlat, 8, true, Stagger::lat_face};
  HaloExchange ex(d, {HaloWidths::uniform(1), true, PolePolicy::across_pole_point});
  if (p > 1 && world_rank() == 0) EXPECT_EQ(d.box().lat.length, 0);
  Tensor field = ex.allocate(DType::f64, {1});
  Tensor interior = ex.interior(field);
  d.scatter(serial_field<double>(g, 1), interior);
  ex.exchange(field);
  std::int64_t checked = 0;
  EXPECT_EQ(check_halo<double>(ex, g, field, 1.0, checked), "");
}

TEST(Stagger, FacesOfTheOtherRowsAreRejected) {
  const Decomposition cells(world(), {12, 8}, ProcessGrid{world_size(), 1});
  const HaloWidths w = HaloWidths::uniform(1);
  EXPECT_THROW(HaloExchange(cells.staggered(Stagger::lat_face), {w, true, PolePolicy::across_pole_point}),
               InvalidArgument);
  EXPECT_THROW(HaloExchange(cells.staggered(Stagger::lat_face, LatitudeRows::pole_points),
                            {w, true, PolePolicy::across_pole}),
               InvalidArgument);
}

// u on the east faces, v on the latitude faces: both negated beyond the poles under the
// mirroring policies, and the pair's adjoint is its transpose.
TEST(Stagger, CGridVectorPairFlipsAcrossThePoleAndItsAdjointIsTheTranspose) {
  for (const ProcessGrid& pg : grids())
    for (const Case& c : cases()) {
      const Decomposition cells(world(), {2, c.nlat, c.nlon}, pg);
      const Decomposition du = cells.staggered(Stagger::lon_face), dv = cells.staggered(Stagger::lat_face, c.rows);
      HaloExchange xu(du, {c.width, c.periodic, c.pole}), xv(dv, {c.width, c.periodic, c.pole});
      const Geometry gu{c.nlat, c.nlon, c.rows == LatitudeRows::pole_points, Stagger::lon_face};
      const Geometry gv{c.nlat, c.nlon, c.rows == LatitudeRows::pole_points, Stagger::lat_face};
      Tensor u = xu.allocate(DType::f64, {2}), v = xv.allocate(DType::f64, {2});
      Tensor ui = xu.interior(u), vi = xv.interior(v);
      du.scatter(serial_field<double>(gu, 2), ui);
      dv.scatter(serial_field<double>(gv, 2), vi);
      exchange_vector(xu, u, xv, v);
      const double flip = mirrors_across_pole(c.pole) ? -1.0 : 1.0;
      std::int64_t checked = 0;
      const std::string what = describe(c, pg, Stagger::lat_face, DType::f64);
      EXPECT_EQ(check_halo<double>(xu, gu, u, flip, checked), "") << what;
      EXPECT_EQ(check_halo<double>(xv, gv, v, flip, checked), "") << what;

      std::mt19937_64 rng(17 + world_rank());
      std::uniform_real_distribution<double> uni(-1.0, 1.0);
      Tensor x[2] = {xu.allocate(DType::f64, {2}), xv.allocate(DType::f64, {2})};
      Tensor y[2] = {xu.allocate(DType::f64, {2}), xv.allocate(DType::f64, {2})};
      for (Tensor* t : {&x[0], &x[1], &y[0], &y[1]})
        for (std::int64_t k = 0; k < t->numel(); ++k) t->data<double>()[k] = uni(rng);
      Tensor ax[2] = {x[0].clone(), x[1].clone()}, aty[2] = {y[0].clone(), y[1].clone()};
      exchange_vector(xu, ax[0], xv, ax[1]);
      exchange_vector_adjoint(xu, aty[0], xv, aty[1]);
      double sums[2] = {0, 0};
      for (int k = 0; k < 2; ++k)
        for (std::int64_t e = 0; e < x[k].numel(); ++e) {
          sums[0] += ax[k].data<double>()[e] * y[k].data<double>()[e];
          sums[1] += x[k].data<double>()[e] * aty[k].data<double>()[e];
        }
      MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_NEAR(sums[0], sums[1], 1e-12 * std::max(1.0, std::abs(sums[0]))) << what;
    }
}

// ⟨A x, y⟩ = ⟨x, Aᵀ y⟩ over all ranks for every staggered field, f32 and f64.
TEST(Stagger, AdjointPassesTheDotProductIdentity) {
  for (const ProcessGrid& pg : grids())
    for (const Case& c : cases())
      for (Stagger s : {Stagger::lon_face, Stagger::lat_face})
        for (DType dtype : {DType::f64, DType::f32}) {
          const Decomposition d = Decomposition(world(), {3, c.nlat, c.nlon}, pg).staggered(s, c.rows);
          HaloExchange ex(d, {c.width, c.periodic, c.pole});
          std::mt19937_64 rng(5 + world_rank());
          std::uniform_real_distribution<double> uni(-1.0, 1.0);
          std::vector<double> xs, ys;
          const std::int64_t n = shape_numel(ex.padded_shape({3}));
          for (std::int64_t k = 0; k < n; ++k) {
            // Values a float holds exactly, so both dtypes see the same numbers.
            xs.push_back(static_cast<float>(uni(rng)));
            ys.push_back(static_cast<float>(uni(rng)));
          }
          auto make = [&](const std::vector<double>& v) {
            if (dtype == DType::f64) return Tensor::from_vector<double>(v, ex.padded_shape({3}));
            return Tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), ex.padded_shape({3}));
          };
          auto values = [&](const Tensor& t) {
            if (dtype == DType::f64) return t.to_vector<double>();
            const std::vector<float> f = t.to_vector<float>();
            return std::vector<double>(f.begin(), f.end());
          };
          Tensor ax = make(xs), aty = make(ys);
          ex.exchange(ax);
          ex.exchange_adjoint(aty);
          const std::vector<double> axv = values(ax), atyv = values(aty);
          double sums[2] = {0, 0};
          for (std::int64_t k = 0; k < n; ++k) {
            sums[0] += axv[k] * ys[k];
            sums[1] += xs[k] * atyv[k];
          }
          MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
          EXPECT_NEAR(sums[0], sums[1], tol * std::max(1.0, std::abs(sums[0]))) << describe(c, pg, s, dtype);
        }
}
