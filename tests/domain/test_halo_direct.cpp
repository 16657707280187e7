// The forward halo exchange through MPI datatypes over the fields' own memory (the host
// path for messages with rows of at least 256 bytes, src/domain/halo_buffers.cpp,
// Plan::prepare_direct): every halo cell of wide fields (f32 and f64 in one exchange, an
// odd longitude count so that the packed layout has padding between fields) follows the
// rule it must (owner's value, periodic wrap, pole policy, zero), on 1-D and 2x2 grids
// where wide latitude messages go direct and narrow longitude messages are packed; the
// datatypes follow the fields when other tensors are passed; and the adjoint, which still
// packs, is the transpose of the direct forward map.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <sstream>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;
using namespace tessera::domain;
using tessera::testing::world_size;

namespace {

Communicator& world() {
  static Communicator comm(MPI_COMM_WORLD);
  return comm;
}

// (lead, global lat, global lon) -> a value exact in f32 for these sizes.
double encode(std::int64_t lead, std::int64_t i, std::int64_t j) {
  return 1.0 + static_cast<double>(lead) * 1.0e6 + static_cast<double>(i) * 1000.0 + static_cast<double>(j);
}

// The value the halo rule gives global cell (i, j), or 0 for a zero cell.
double expected(std::int64_t lead, std::int64_t i, std::int64_t j, std::int64_t nlat, std::int64_t nlon,
                const HaloSpec& spec) {
  if (i < 0 || i >= nlat) {
    if (spec.pole == PolePolicy::zero) return 0.0;
    if (spec.pole == PolePolicy::replicate) {
      i = i < 0 ? 0 : nlat - 1;
    } else {
      i = i < 0 ? -(i + 1) : (nlat - 1) - (i - nlat);
      j += nlon / 2;
    }
  }
  if (spec.periodic_lon) {
    j = ((j % nlon) + nlon) % nlon;
  } else if (j < 0 || j >= nlon) {
    return 0.0;
  }
  return encode(lead, i, j);
}

template <class T>
void fill(const HaloExchange& ex, Tensor& field) {
  const LocalBox box = ex.decomposition().box();
  const HaloWidths w = ex.spec().width;
  const std::int64_t pl = field.size(field.dim() - 2), pn = field.size(field.dim() - 1), lead = field.numel() / (pl * pn);
  T* p = field.data<T>();
  for (std::int64_t l = 0; l < lead; ++l)
    for (std::int64_t a = 0; a < pl; ++a)
      for (std::int64_t b = 0; b < pn; ++b) {
        const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
        const bool inside = i >= box.lat.start && i < box.lat.end() && j >= box.lon.start && j < box.lon.end();
        p[(l * pl + a) * pn + b] = static_cast<T>(inside ? encode(l, i, j) : -7.0);
      }
}

template <class T>
std::string check(const HaloExchange& ex, const Tensor& field) {
  const Decomposition& d = ex.decomposition();
  const LocalBox box = d.box();
  const HaloWidths w = ex.spec().width;
  const std::int64_t pl = field.size(field.dim() - 2), pn = field.size(field.dim() - 1), lead = field.numel() / (pl * pn);
  const T* p = field.data<T>();
  std::ostringstream bad;
  int errors = 0;
  for (std::int64_t l = 0; l < lead; ++l)
    for (std::int64_t a = 0; a < pl; ++a)
      for (std::int64_t b = 0; b < pn; ++b) {
        const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
        const double want = expected(l, i, j, d.global_lat(), d.global_lon(), ex.spec());
        const double got = static_cast<double>(p[(l * pl + a) * pn + b]);
        if (got != want && errors++ < 5) {
          bad << " [rank " << d.rank() << " lead " << l << " (" << i << ", " << j << "): got " << got << " want "
              << want << "]";
        }
      }
  if (errors) bad << " (" << errors << " wrong)";
  return bad.str();
}

std::vector<ProcessGrid> grids() {
  const int p = world_size();
  std::vector<ProcessGrid> g{{p, 1}};
  if (p == 4) g.push_back({2, 2});
  return g;
}

}  // namespace

TEST(HaloDirect, WideFieldsFollowTheRule) {
  for (const ProcessGrid& grid : grids())
    for (const HaloWidths& width : {HaloWidths::uniform(1), HaloWidths{2, 1, 2, 1}})
      for (PolePolicy pole : {PolePolicy::zero, PolePolicy::replicate, PolePolicy::across_pole})
        for (bool periodic : {true, false}) {
          if (pole == PolePolicy::across_pole && !periodic) continue;  // across the pole needs the wrap
          Decomposition d(world(), {3, 24, 194}, grid);
          HaloSpec spec;
          spec.width = width;
          spec.periodic_lon = periodic;
          spec.pole = pole;
          HaloExchange ex(d, spec);
          // f32 with one leading index and an odd row (97 or 194 / 2 = 97 columns) leaves
          // the packed layout padding before the next field.
          std::vector<Tensor> fields = {ex.allocate(DType::f32, {1}), ex.allocate(DType::f64, {3}),
                                        ex.allocate(DType::f32, {3})};
          for (int round = 0; round < 2; ++round) {
            fill<float>(ex, fields[0]);
            fill<double>(ex, fields[1]);
            fill<float>(ex, fields[2]);
            if (round == 0) {
              ex.exchange(fields);
            } else {
              ex.start(fields);
              ex.finish();
            }
            const std::string what = shape_str(d.global_shape()) + " on " + grid.str() + " " + width.str() + " " +
                                     std::string(pole_policy_name(pole)) + (periodic ? " periodic" : " bounded");
            EXPECT_EQ(check<float>(ex, fields[0]), "") << what;
            EXPECT_EQ(check<double>(ex, fields[1]), "") << what;
            EXPECT_EQ(check<float>(ex, fields[2]), "") << what;
          }
        }
}

TEST(HaloDirect, NewFieldsGetNewDatatypes) {
  Decomposition d(world(), {2, 16, 128});
  HaloSpec spec;
  spec.width = HaloWidths::uniform(1);
  spec.periodic_lon = true;
  HaloExchange ex(d, spec);
  for (int k = 0; k < 3; ++k) {
    Tensor field = ex.allocate(DType::f32, {2});  // a new tensor (new memory) every time
    fill<float>(ex, field);
    ex.exchange({field});
    EXPECT_EQ(check<float>(ex, field), "") << "field " << k;
  }
}

TEST(HaloDirect, AdjointIsTheTransposeOfTheDirectForward) {
  for (const ProcessGrid& grid : grids()) {
    Decomposition d(world(), {2, 20, 160}, grid);
    HaloSpec spec;
    spec.width = {2, 1, 1, 2};
    spec.periodic_lon = true;
    spec.pole = PolePolicy::across_pole;
    HaloExchange ex(d, spec);
    Tensor x = ex.allocate(DType::f64, {2}), y = ex.allocate(DType::f64, {2});
    double* px = x.data<double>();
    double* py = y.data<double>();
    for (std::int64_t k = 0; k < x.numel(); ++k) {
      px[k] = std::sin(0.37 * static_cast<double>(k) + d.rank());
      py[k] = std::cos(0.23 * static_cast<double>(k) - d.rank());
    }
    Tensor ax = x.clone(), aty = y.clone();
    ex.exchange({ax});
    ex.exchange_adjoint({aty});
    double local[2] = {0, 0}, total[2] = {0, 0};
    for (std::int64_t k = 0; k < x.numel(); ++k) {
      local[0] += ax.data<double>()[k] * py[k];
      local[1] += px[k] * aty.data<double>()[k];
    }
    MPI_Allreduce(local, total, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_NEAR(total[0], total[1], 1e-9 * std::max(1.0, std::abs(total[0]))) << grid.str();
  }
}
