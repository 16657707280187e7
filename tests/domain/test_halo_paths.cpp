// The halo exchange's host message paths (src/domain/halo_direct.cpp,
// halo_node_memory.cpp, halo_buffers.cpp), each checked against the halo rule (owner's
// value, periodic wrap, pole policy, zero) and, through the adjoint, the transpose:
//   - MPI datatypes over the fields' own memory (Plan::prepare_direct: forward messages
//     of at most 64 KiB with rows of at least 256 bytes): wide fields (f32 and f64 in one
//     exchange, an odd longitude count so that the packed layout has padding between
//     fields) on 1-D and 2x2 grids where wide latitude messages go direct and narrow
//     longitude messages are packed; the datatypes follow the fields when other tensors
//     are passed;
//   - node memory (Plan::prepare_node_memory: messages of 8 KiB or more between ranks of
//     one node, read from the sender's packed bytes), forward and adjoint, repeated;
//   - packed MPI messages, for the same fields with every rank on its own emulated node
//     (TESSERA_NODE_SIZE=1).
// HaloPlanStats says which path each exchange took.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <optional>

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

TEST(HaloPaths, WideFieldsGoDirectAndFollowTheRule) {
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

// Every rank on a node of its own (TESSERA_NODE_SIZE=1) while it lives: the plans made
// meanwhile send every message through MPI. Set and cleared alike on every rank.
class OwnNodes {
 public:
  OwnNodes() { setenv("TESSERA_NODE_SIZE", "1", 1); }
  ~OwnNodes() { unsetenv("TESSERA_NODE_SIZE"); }
  OwnNodes(const OwnNodes&) = delete;
  OwnNodes& operator=(const OwnNodes&) = delete;
};

// 4 f32 fields of 8 channels x 600 columns send 75 KiB per latitude message at width 1,
// the 2x2 grid's 300-column halves 37.5 KiB, its longitude messages (1-cell rows) 1 KiB
// and the corners 128 bytes. On one node the latitude messages go through node memory
// and the others are packed. On nodes of their own, messages over
// Plan::kDirectMaxBytes (64 KiB) are packed even with long rows and the 2x2 halves go
// direct. Every cell follows the rule on every path, in exchanges one after the other
// (a segment is packed again only after its reader said it was read).
TEST(HaloPaths, LargeMessagesThroughNodeMemoryOrMpiFollowTheRule) {
  for (bool own_nodes : {false, true})
    for (const ProcessGrid& grid : direct_grids()) {
      std::optional<OwnNodes> emulated;
      if (own_nodes) emulated.emplace();
      Decomposition d(world(), {8, 16, 600}, grid);
      HaloSpec spec;
      spec.width = HaloWidths::uniform(1);
      spec.periodic_lon = true;
      spec.pole = PolePolicy::across_pole;
      HaloExchange ex(d, spec);
      std::vector<Tensor> fields;
      for (int k = 0; k < 4; ++k) fields.push_back(ex.allocate(DType::f32, {8}));
      const std::string what = grid.str() + (own_nodes ? " on nodes of their own" : " on one node");
      for (int round = 0; round < 3; ++round) {
        for (Tensor& f : fields) fill_coordinates<float>(ex, f);
        // Another field set in between: the segments are sized anew (and back).
        if (round == 1) ex.exchange(std::vector<Tensor>{});
        ex.exchange(fields);
        for (const Tensor& f : fields) EXPECT_EQ(check_coordinates<float>(ex, f), "") << what << " round " << round;
      }
      const HaloPlanStats& stats = ex.stats();
      if (world_size() == 1) {
        EXPECT_EQ(stats.node_memory_messages, 0) << what;
      } else if (own_nodes) {
        EXPECT_EQ(stats.node_memory_messages, 0) << what;
        EXPECT_EQ(stats.direct_messages > 0, grid.lon > 1) << what;  // only the 2x2 halves go direct
      } else {
        // The latitude edges through node memory; the small corner (and 2x2 longitude)
        // messages, with rows too short to go direct, packed.
        EXPECT_GT(stats.node_memory_messages, 0) << what;
        EXPECT_LT(stats.node_memory_messages, stats.send_messages) << what;
        EXPECT_EQ(stats.direct_messages, 0) << what;
      }
    }
}

// Two plans of one communicator, both through node memory, started in the same order and
// finished in opposite orders on even and odd ranks: each plan's offsets and "read"
// answers travel on its own node communicator, so neither takes the other's; three
// rounds, every cell by the rule.
TEST(HaloPaths, PlansFinishedInDifferentOrdersKeepTheirNodeMessagesApart) {
  Decomposition d(world(), {8, 16, 600});
  HaloSpec spec;
  spec.width = HaloWidths::uniform(1);
  spec.periodic_lon = true;
  HaloExchange a(d, spec), b(d, spec);
  Tensor fa = a.allocate(DType::f32, {8}), fb = b.allocate(DType::f64, {8});
  for (int round = 0; round < 3; ++round) {
    fill_coordinates<float>(a, fa);
    fill_coordinates<double>(b, fb);
    a.start({fa});
    b.start({fb});
    if (d.rank() % 2 == 0) {
      a.finish();
      b.finish();
    } else {
      b.finish();
      a.finish();
    }
    EXPECT_EQ(check_coordinates<float>(a, fa), "") << "round " << round;
    EXPECT_EQ(check_coordinates<double>(b, fb), "") << "round " << round;
  }
  if (world_size() > 1) {
    EXPECT_GT(a.stats().node_memory_messages, 0);
    EXPECT_GT(b.stats().node_memory_messages, 0);
  }
}

TEST(HaloPaths, NewFieldsGetNewDatatypes) {
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

// ⟨A x, y⟩ = ⟨x, Aᵀ y⟩ with the forward direct (2 x 20 x 160 f64: 5 KiB messages) and
// through node memory both ways (8 x 20 x 640: 80 KiB), and, on nodes of their own, the
// large one packed.
TEST(HaloPaths, AdjointIsTheTransposeOfTheForwardOnEveryPath) {
  struct Case {
    Shape shape;
    bool own_nodes;
  };
  for (const Case& c : {Case{{2, 20, 160}, false}, Case{{8, 20, 640}, false}, Case{{8, 20, 640}, true}})
    for (const ProcessGrid& grid : direct_grids()) {
      std::optional<OwnNodes> emulated;
      if (c.own_nodes) emulated.emplace();
      Decomposition d(world(), c.shape, grid);
      HaloSpec spec;
      spec.width = {2, 1, 1, 2};
      spec.periodic_lon = true;
      spec.pole = PolePolicy::across_pole;
      HaloExchange ex(d, spec);
      const Shape leading{c.shape[0]};
      Tensor x = ex.allocate(DType::f64, leading), y = ex.allocate(DType::f64, leading);
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
      const std::string what = shape_str(c.shape) + " on " + grid.str() + (c.own_nodes ? " on nodes of their own" : "");
      EXPECT_NEAR(total[0], total[1], 1e-9 * std::max(1.0, std::abs(total[0]))) << what;
      if (world_size() > 1 && c.shape[0] == 8) EXPECT_EQ(ex.stats().node_memory_messages > 0, !c.own_nodes) << what;
    }
}
