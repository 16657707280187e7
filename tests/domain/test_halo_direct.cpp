// The forward halo exchange through MPI datatypes over the fields' own memory (the host
// path for messages of at most 64 KiB with rows of at least 256 bytes,
// src/domain/halo_buffers.cpp, Plan::prepare_direct): every halo cell of wide fields (f32 and f64 in one exchange, an
// odd longitude count so that the packed layout has padding between fields) follows the
// rule it must (owner's value, periodic wrap, pole policy, zero), on 1-D and 2x2 grids
// where wide latitude messages go direct and narrow longitude messages are packed; the
// datatypes follow the fields when other tensors are passed; and the adjoint, which still
// packs, is the transpose of the direct forward map.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;
using namespace tessera::domain;
using namespace tessera::testing;  // world(), world_size(), the halo rule's fill and check

namespace {

// Latitude bands, and 2x2 at four ranks.
std::vector<ProcessGrid> direct_grids() {
  const int p = world_size();
  std::vector<ProcessGrid> g{{p, 1}};
  if (p == 4) g.push_back({2, 2});
  return g;
}

}  // namespace

TEST(HaloDirect, WideFieldsFollowTheRule) {
  for (const ProcessGrid& grid : direct_grids())
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
            fill_coordinates<float>(ex, fields[0]);
            fill_coordinates<double>(ex, fields[1]);
            fill_coordinates<float>(ex, fields[2]);
            if (round == 0) {
              ex.exchange(fields);
            } else {
              ex.start(fields);
              ex.finish();
            }
            const std::string what = shape_str(d.global_shape()) + " on " + grid.str() + " " + width.str() + " " +
                                     std::string(pole_policy_name(pole)) + (periodic ? " periodic" : " bounded");
            EXPECT_EQ(check_coordinates<float>(ex, fields[0]), "") << what;
            EXPECT_EQ(check_coordinates<double>(ex, fields[1]), "") << what;
            EXPECT_EQ(check_coordinates<float>(ex, fields[2]), "") << what;
          }
        }
}

// Messages over Plan::kDirectMaxBytes (64 KiB) are packed even with long rows: 4 f32
// fields of 8 channels x 600 columns send 75 KiB per latitude message at width 1, while
// the 2x2 grid's 300-column halves stay under the limit and go direct; the 2x2 grid's
// longitude messages (1-cell rows) are packed. Every cell follows the rule either way.
TEST(HaloDirect, MessagesOverTheSizeLimitArePackedAndFollowTheRule) {
  for (const ProcessGrid& grid : direct_grids()) {
    Decomposition d(world(), {8, 16, 600}, grid);
    HaloSpec spec;
    spec.width = HaloWidths::uniform(1);
    spec.periodic_lon = true;
    HaloExchange ex(d, spec);
    std::vector<Tensor> fields;
    for (int k = 0; k < 4; ++k) fields.push_back(ex.allocate(DType::f32, {8}));
    for (Tensor& f : fields) fill_coordinates<float>(ex, f);
    ex.exchange(fields);
    for (const Tensor& f : fields) EXPECT_EQ(check_coordinates<float>(ex, f), "") << grid.str();
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
    fill_coordinates<float>(ex, field);
    ex.exchange({field});
    EXPECT_EQ(check_coordinates<float>(ex, field), "") << "field " << k;
  }
}

TEST(HaloDirect, AdjointIsTheTransposeOfTheDirectForward) {
  for (const ProcessGrid& grid : direct_grids()) {
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
