// domain::Redistribution's routes: node_aware (pieces gathered on a relay of their node
// before they cross) against direct, its serial twin for the bytes delivered, on nodes
// emulated with TESSERA_NODE_SIZE = 1, 2 and 4 (consecutive world ranks).
//
// At every rank count, node size, code layout (2-D blocks, latitude and longitude bands)
// and model (M = 1 and 2 in latitude bands, two replicas of one box): every model cell
// equals the global field's for several f32 and f64 fields, the two routes deliver the
// same bits both ways, the round trip is exact, and the messages that cross between nodes
// are as many as the rule says (one per (node, model rank) pair with two or more senders,
// counted here from the boxes and the nodes' ranks). per_node placement sees the emulated
// nodes; auto's choice follows its rule; a rank that relays pieces it does not own waits
// under either wait policy; errors (routes that differ, a bad TESSERA_NODE_SIZE on one
// rank, a wrong field) are the same on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "test_redistribution_fields.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"

using namespace tessera;
using namespace tessera::domain;
using tessera::testing::world;  // its wait policy from the real node
using tessera::testing::world_rank;
using tessera::testing::world_size;
using namespace tessera::testing::redistribution;

namespace {

using Route = RedistributionRoute;

// TESSERA_NODE_SIZE=k for one scope (unset for k = 0; `value` verbatim otherwise).
class EmulatedNodes {
 public:
  explicit EmulatedNodes(int k) : EmulatedNodes(k > 0 ? std::to_string(k) : std::string()) {}
  explicit EmulatedNodes(const std::string& value) {
    (void)world();  // its wait policy from the real node, before any emulation
    if (const char* old = std::getenv("TESSERA_NODE_SIZE")) old_ = old;
    if (!value.empty()) {
      setenv("TESSERA_NODE_SIZE", value.c_str(), 1);
    } else {
      unsetenv("TESSERA_NODE_SIZE");
    }
  }
  ~EmulatedNodes() {
    if (old_) {
      setenv("TESSERA_NODE_SIZE", old_->c_str(), 1);
    } else {
      unsetenv("TESSERA_NODE_SIZE");
    }
  }
  EmulatedNodes(const EmulatedNodes&) = delete;
  EmulatedNodes& operator=(const EmulatedNodes&) = delete;

 private:
  std::optional<std::string> old_;
};

// The code's process grids at this rank count. At 8 ranks only the 2 x 4 grid: the
// bands (p x 1, 1 x p) route the same way as at 4 ranks, where they run, and each plan
// at 8 ranks on a 2-core CI machine costs ~0.4 s (the bands took 40 of its 70 s).
std::vector<ProcessGrid> code_grids() {
  const int p = world_size();
  if (p == 8) return {{2, 4}};
  std::vector<ProcessGrid> grids{{p, 1}, {1, p}};
  if (p == 4) grids.push_back({2, 2});
  return grids;
}

int cells(const LocalBox& a, const LocalBox& b) {
  const std::int64_t lat = std::min(a.lat.end(), b.lat.end()) - std::max(a.lat.start, b.lat.start);
  const std::int64_t lon = std::min(a.lon.end(), b.lon.end()) - std::max(a.lon.start, b.lon.start);
  return lat > 0 && lon > 0 ? static_cast<int>(lat * lon) : 0;
}

// The serial twin of the message count: for every model rank and every other node, the
// node's ranks with a piece for it; direct sends each piece across, node_aware one
// message per pair with two or more. Nodes are world ranks / k (one machine).
struct Crossings {
  int direct = 0, node_aware = 0, relayed_pairs = 0, widest = 0;
};
Crossings crossings(const Redistribution& plan, int k) {
  const Decomposition& code = plan.code();
  const int p = code.size(), nodes = (p + k - 1) / k;
  Crossings c;
  for (int i = 0; i < plan.model_size(); ++i) {
    const int home = plan.model_ranks()[static_cast<std::size_t>(i)] / k;
    for (int node = 0; node < nodes; ++node) {
      if (node == home) continue;
      int senders = 0;
      for (int r = node * k; r < std::min(p, (node + 1) * k); ++r) senders += cells(code.box_of(r), plan.model_box_of(i)) > 0;
      c.direct += senders;
      c.node_aware += senders >= 2 ? 1 : senders;
      c.relayed_pairs += senders >= 2;
      c.widest = std::max(c.widest, senders);
    }
  }
  return c;
}

int sum_over_ranks(int v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// The same fields through both plans: the model fields and the code fields coming back
// are the same bits.
void expect_same_delivery(Redistribution& direct, Redistribution& aware) {
  const Decomposition& code = direct.code();
  std::vector<Tensor> code_fields, model_a, model_b, back_a, back_b;
  for (std::size_t k = 0; k < kFields.size(); ++k) {
    code_fields.push_back(filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, code.box()));
    back_a.push_back(Tensor::zeros(code_fields.back().shape(), kFields[k].dtype));
    back_b.push_back(Tensor::zeros(code_fields.back().shape(), kFields[k].dtype));
    if (direct.is_model_rank()) {
      model_a.push_back(Tensor::zeros(direct.model_shape(kFields[k].leading), kFields[k].dtype));
      model_b.push_back(Tensor::zeros(aware.model_shape(kFields[k].leading), kFields[k].dtype));
    }
  }
  direct.to_model(code_fields, model_a);
  aware.start_to_model(code_fields, model_b);
  aware.finish();
  for (std::size_t k = 0; k < model_a.size(); ++k) {
    EXPECT_TRUE(same_bits(model_a[k], model_b[k])) << aware.str() << ", field " << k;
    model_a[k].copy_from(filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, direct.model_box(), -3));
  }
  direct.to_code(model_a, back_a);
  aware.start_to_code(model_a, back_b);
  aware.finish();
  for (std::size_t k = 0; k < back_a.size(); ++k) {
    EXPECT_TRUE(same_bits(back_a[k], back_b[k])) << aware.str() << ": model -> code of field " << k;
  }
}

}  // namespace

TEST(RedistributionRoutes, NodeAwareDeliversTheDirectPlansBitsOnEmulatedNodes) {
  const int p = world_size();
  for (int k : {1, 2, 4}) {
    EmulatedNodes emulated(k);
    for (const ProcessGrid& g : code_grids()) {
      Decomposition code(world(), {kLat, kLon}, g);
      struct Case {
        ModelRanks ranks;
        ModelLayout layout;
      };
      std::vector<Case> cases{{ModelRanks::count(1), {}}};
      if (p >= 2) {
        cases.push_back({ModelRanks::count(2), {}});
        cases.push_back({ModelRanks::list({p - 1, 0}), {{0, 0}, 2}});  // two replicas of the whole field
      }
      for (const Case& c : cases) {
        Redistribution direct(code, c.ranks, c.layout, {Route::direct});
        Redistribution aware(code, c.ranks, c.layout, {Route::node_aware});
        const std::string where = aware.str() + ", nodes of " + std::to_string(k);
        EXPECT_EQ(direct.route(), Route::direct);
        EXPECT_EQ(aware.route(), Route::node_aware);
        EXPECT_EQ(aware.stats().nodes, (p + k - 1) / k) << where;
        EXPECT_EQ(direct.model_ranks(), aware.model_ranks());
        check_round_trip(aware, false);
        check_round_trip(aware, true);
        expect_same_delivery(direct, aware);
        const Crossings want = crossings(aware, k);
        EXPECT_EQ(sum_over_ranks(direct.stats().internode_sends), want.direct) << where;
        EXPECT_EQ(sum_over_ranks(aware.stats().internode_sends), want.node_aware) << where;
        EXPECT_EQ(sum_over_ranks(aware.stats().relays), want.relayed_pairs)
            << where;
      }
    }
  }
}

TEST(RedistributionRoutes, PerNodePlacementSeesTheEmulatedNodes) {
  // One model rank per GPU of each node (one per node without GPUs), nodes of k
  // consecutive ranks: the same nodes the node-aware route sees.
  const int p = world_size();
  for (int k : {1, 2, 4}) {
    EmulatedNodes emulated(k);
    std::vector<int> want;
    for (int first = 0; first < p; first += k) {
      const int local = std::min(k, p - first), g = std::clamp(cuda_device_count(), 1, local);
      for (int j = 0; j < g; ++j) want.push_back(first + j * local / g);
    }
    EXPECT_EQ(resolve_model_ranks(world(), ModelRanks::per_node()), want) << "nodes of " << k;
    Decomposition code(world(), {kLat, kLon}, code_grids().front());
    Redistribution plan(code, ModelRanks::per_node(), {}, {Route::node_aware});
    EXPECT_EQ(plan.model_ranks(), want);
    check_round_trip(plan, true);
  }
}

TEST(RedistributionRoutes, AutoFollowsItsRule) {
  // node_aware when the ranks span several nodes and a node holds at least the threshold
  // of senders to one model rank on another node: the default (8, out of reach below 9
  // ranks) and 2, 3.
  const int p = world_size();
  for (int k : {0, 1, 2, 4}) {  // 0: the real node, one here
    EmulatedNodes emulated(k);
    for (const ProcessGrid& g : code_grids()) {
      Decomposition code(world(), {kLat, kLon}, g);
      for (int m : {1, 2}) {
        if (m > p) continue;
        for (int threshold : {kNodeAwareSenders, 2, 3}) {
          Redistribution plan(code, ModelRanks::count(m), {}, {Route::automatic, threshold});
          const Crossings c = crossings(plan, k == 0 ? p : k);
          const bool several_nodes = k > 0 && k < p;
          const Route want = several_nodes && c.widest >= threshold ? Route::node_aware : Route::direct;
          EXPECT_EQ(plan.route(), want) << plan.str() << ", nodes of " << k << ", widest " << c.widest;
          if (threshold == 2) check_round_trip(plan, false);
        }
      }
    }
  }
}

TEST(RedistributionRoutes, ARankThatRelaysPiecesItDoesNotOwnWaitsUnderEitherPolicy) {
  // Nodes {0 .. p-2} and {p-1}; latitude bands; the model on ranks p-1 (the top half) and
  // p-2 (the bottom half). From 3 ranks on, the first node's pieces for model rank 0 (on
  // the other node) are relayed by the node's model rank, p-2, whose own band holds none
  // of them from 4 ranks on; at 2 ranks each node has one sender and nothing is relayed.
  const int p = world_size();
  EmulatedNodes emulated(std::max(1, p - 1));
  for (WaitPolicy policy : {WaitPolicy::sleep, WaitPolicy::spin}) {
    Communicator comm(MPI_COMM_WORLD, WaitOptions{policy, std::chrono::microseconds(20)});
    Decomposition code(comm, {kLat, kLon}, ProcessGrid{p, 1});
    Redistribution plan(code, ModelRanks::list({p - 1, p - 2}), {}, {Route::node_aware});
    ASSERT_EQ(plan.code().comm().wait_policy(), policy);
    const Crossings want = crossings(plan, std::max(1, p - 1));
    ASSERT_EQ(want.relayed_pairs, p >= 3 ? 1 : 0);
    EXPECT_EQ(sum_over_ranks(plan.stats().relays), want.relayed_pairs);
    if (p >= 3 && world_rank() == p - 2) {
      EXPECT_EQ(plan.stats().relays, 1);
      // From 4 ranks on its band is below the top half: it relays pieces it does not own.
      if (p >= 4) EXPECT_EQ(cells(code.box(), plan.model_box_of(0)), 0);
    }
    check_round_trip(plan, false);
    check_round_trip(plan, true);
  }
}

TEST(RedistributionRoutes, ErrorsAreTheSameOnEveryRank) {
  const int p = world_size();
  EmulatedNodes emulated(2);
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  if (p >= 2) {
    expect_error<InvalidArgument>(
        [&] {
          Redistribution plan(code, ModelRanks::count(1), {}, {world_rank() == p - 1 ? Route::node_aware : Route::direct});
        },
        "different routes");
    expect_error<InvalidArgument>(
        [&] { Redistribution plan(code, ModelRanks::count(1), {}, {Route::automatic, world_rank() == 0 ? 4 : 8}); },
        "different routes");
  }
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(1), {}, {Route::automatic, 1}); },
                                "node_aware_senders = 1");
  {
    // A bad emulated node size on the last rank only.
    EmulatedNodes bad(world_rank() == p - 1 ? "two" : "2");
    expect_error<ConfigError>([&] { Redistribution plan(code, ModelRanks::count(1)); }, "TESSERA_NODE_SIZE");
  }
  Redistribution plan(code, ModelRanks::count(1), {}, {Route::node_aware});
  const Tensor good = Tensor::zeros(code.local_shape({}), DType::f32);
  const Tensor bad = Tensor::zeros({code.box().lat.length, code.box().lon.length + 1}, DType::f32);
  const std::vector<Tensor> model =
      plan.is_model_rank() ? std::vector<Tensor>{Tensor::zeros(plan.model_shape({}), DType::f32)} : std::vector<Tensor>{};
  expect_error<ShapeError>([&] { plan.to_model({world_rank() == p - 1 ? bad : good}, model); }, "code field 0");
  check_round_trip(plan, false);  // still usable
}
