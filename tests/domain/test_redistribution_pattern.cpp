// make_redistribution_pattern, the redistribution plan's pure arithmetic, without MPI:
// the rectangles each rank sends and receives, in each direction, worked out by hand
// for small layouts — one model rank receiving a 2x2 code decomposition, two replicas
// of which only the first sends back, and the node_aware route with its relay and the
// threshold that turns it on.

#include <gtest/gtest.h>

#include <vector>

#include "domain/redistribution_plan.hpp"

namespace tessera::domain::redistribution_detail {
namespace {

LocalBox box(std::int64_t lat, std::int64_t nlat, std::int64_t lon, std::int64_t nlon) {
  return {ShardRange{lat, nlat}, ShardRange{lon, nlon}};
}

void expect_rect(const Rect& r, std::int64_t lat, std::int64_t nlat, std::int64_t lon, std::int64_t nlon) {
  EXPECT_EQ(r.lat, lat);
  EXPECT_EQ(r.nlat, nlat);
  EXPECT_EQ(r.lon, lon);
  EXPECT_EQ(r.nlon, nlon);
}

std::vector<int> peers(const std::vector<Transfer>& list) {
  std::vector<int> out;
  for (const Transfer& t : list) out.push_back(t.peer);
  return out;
}

// An 8 x 8 grid in 2 x 2 blocks of 4 x 4 on one node; the model on code rank 0 alone.
PatternInputs blocks_to_one_model_rank(int me) {
  PatternInputs in;
  in.global_lat = 8;
  in.global_lon = 8;
  in.code_boxes = {box(0, 4, 0, 4), box(0, 4, 4, 4), box(4, 4, 0, 4), box(4, 4, 4, 4)};
  in.node_of = {0, 0, 0, 0};
  in.model_ranks = {0};
  in.grid = ProcessGrid{1, 1};
  in.me = me;
  return in;
}

TEST(RedistributionPattern, ModelRankReceivesEveryOtherBlockAndCopiesItsOwn) {
  const RedistributionPattern p = make_redistribution_pattern(blocks_to_one_model_rank(0));
  EXPECT_EQ(p.route, RedistributionRoute::direct);  // automatic on one node
  ASSERT_EQ(p.to_model_self.size(), 1u);
  expect_rect(p.to_model_self[0], 0, 4, 0, 4);
  ASSERT_EQ(p.to_code_self.size(), 1u);
  EXPECT_EQ(p.stats.self_cells, 16);
  EXPECT_TRUE(p.to_model_sends.empty());
  EXPECT_TRUE(p.to_code_recvs.empty());
  ASSERT_EQ(peers(p.to_model_recvs), (std::vector<int>{1, 2, 3}));
  expect_rect(p.to_model_recvs[0].rect, 0, 4, 4, 4);
  expect_rect(p.to_model_recvs[1].rect, 4, 4, 0, 4);
  expect_rect(p.to_model_recvs[2].rect, 4, 4, 4, 4);
  EXPECT_EQ(peers(p.to_code_sends), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(p.stats.to_model_recvs, 3);
  EXPECT_EQ(p.stats.to_code_sends, 3);
  EXPECT_EQ(p.stats.to_model_sends, 0);
  EXPECT_EQ(p.stats.nodes, 1);
  EXPECT_EQ(p.stats.internode_sends, 0);
}

TEST(RedistributionPattern, CodeRankSendsItsBlockToTheModelRankAndGetsItBack) {
  const RedistributionPattern p = make_redistribution_pattern(blocks_to_one_model_rank(3));
  EXPECT_TRUE(p.to_model_self.empty());
  EXPECT_TRUE(p.to_model_recvs.empty());
  EXPECT_TRUE(p.to_code_sends.empty());
  ASSERT_EQ(peers(p.to_model_sends), (std::vector<int>{0}));
  expect_rect(p.to_model_sends[0].rect, 4, 4, 4, 4);
  ASSERT_EQ(peers(p.to_code_recvs), (std::vector<int>{0}));
  expect_rect(p.to_code_recvs[0].rect, 4, 4, 4, 4);
  EXPECT_EQ(p.stats.to_model_sends, 1);
  EXPECT_EQ(p.stats.to_code_recvs, 1);
  EXPECT_EQ(p.stats.self_cells, 0);
}

TEST(RedistributionPattern, OnlyTheFirstReplicaSendsBack) {
  // Two replicas of one box: model rank 0 on code rank 0, model rank 1 on code rank 2.
  PatternInputs in = blocks_to_one_model_rank(2);
  in.model_ranks = {0, 2};
  const RedistributionPattern replica1 = make_redistribution_pattern(in);
  ASSERT_EQ(replica1.to_model_self.size(), 1u);
  expect_rect(replica1.to_model_self[0], 4, 4, 0, 4);
  EXPECT_TRUE(replica1.to_code_self.empty());
  EXPECT_EQ(peers(replica1.to_model_recvs), (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(replica1.to_code_sends.empty());
  // Its own block goes to replica 0 and comes back from it alone.
  EXPECT_EQ(peers(replica1.to_model_sends), (std::vector<int>{0}));
  EXPECT_EQ(peers(replica1.to_code_recvs), (std::vector<int>{0}));

  in.me = 1;  // a code rank only: its block to both replicas, back from replica 0
  const RedistributionPattern code_rank = make_redistribution_pattern(in);
  EXPECT_EQ(peers(code_rank.to_model_sends), (std::vector<int>{0, 2}));
  EXPECT_EQ(peers(code_rank.to_code_recvs), (std::vector<int>{0}));
}

TEST(RedistributionPattern, LatitudeBandsOfTheModelCutTheCodeBlocks) {
  // The model on code ranks 0 and 3 in two latitude bands of 4 rows; the code in
  // longitude bands of 4 columns: each code rank sends each model rank a 4 x 4 piece.
  PatternInputs in;
  in.global_lat = 8;
  in.global_lon = 8;
  in.code_boxes = {box(0, 8, 0, 4), box(0, 8, 4, 4)};
  in.node_of = {0, 0};
  in.model_ranks = {1, 0};  // model rank 0 on code rank 1
  in.grid = ProcessGrid{2, 1};
  in.me = 0;
  const RedistributionPattern p = make_redistribution_pattern(in);
  // As code rank 0: rows 0-3 of its band go to code rank 1 (model rank 0); rows 4-7
  // stay (model rank 1 is itself).
  ASSERT_EQ(peers(p.to_model_sends), (std::vector<int>{1}));
  expect_rect(p.to_model_sends[0].rect, 0, 4, 0, 4);
  ASSERT_EQ(p.to_model_self.size(), 1u);
  expect_rect(p.to_model_self[0], 4, 4, 0, 4);
  // As model rank 1: code rank 1's columns 4-7 of rows 4-7.
  ASSERT_EQ(peers(p.to_model_recvs), (std::vector<int>{1}));
  expect_rect(p.to_model_recvs[0].rect, 4, 4, 4, 4);
}

// Four latitude bands of an 8 x 2 grid on two nodes (code ranks 0, 1 and 2, 3); the
// model on code rank 0.
PatternInputs two_nodes(int me, int threshold) {
  PatternInputs in;
  in.global_lat = 8;
  in.global_lon = 2;
  in.code_boxes = {box(0, 2, 0, 2), box(2, 2, 0, 2), box(4, 2, 0, 2), box(6, 2, 0, 2)};
  in.node_of = {0, 0, 2, 2};
  in.model_ranks = {0};
  in.grid = ProcessGrid{1, 1};
  in.options.node_aware_senders = threshold;
  in.me = me;
  return in;
}

TEST(RedistributionPattern, NodeAwareRelaysTheOtherNodesPiecesThroughItsFirstRank) {
  // Two senders on node 2 reach the threshold 2: automatic picks node_aware, and node 2
  // (no model rank of its own) relays through its first rank, code rank 2.
  const RedistributionPattern relay = make_redistribution_pattern(two_nodes(2, 2));
  EXPECT_EQ(relay.route, RedistributionRoute::node_aware);
  EXPECT_EQ(relay.stats.nodes, 2);
  EXPECT_TRUE(relay.to_model_sends.empty());
  EXPECT_TRUE(relay.gather_sends.empty());  // its own piece travels in its message
  ASSERT_EQ(relay.relay_to_model.size(), 1u);
  EXPECT_EQ(relay.relay_to_model[0].peer, 0);
  EXPECT_EQ(relay.relay_to_model[0].members, (std::vector<int>{2, 3}));
  ASSERT_EQ(relay.relay_to_model[0].rects.size(), 2u);
  expect_rect(relay.relay_to_model[0].rects[0], 4, 2, 0, 2);
  expect_rect(relay.relay_to_model[0].rects[1], 6, 2, 0, 2);
  ASSERT_EQ(relay.relay_to_code.size(), 1u);
  EXPECT_EQ(relay.stats.relays, 1);
  EXPECT_EQ(relay.stats.internode_sends, 1);
  EXPECT_EQ(relay.stats.to_model_sends, 1);
  EXPECT_EQ(relay.stats.to_model_recvs, 1);  // code rank 3's piece, the first stage

  const RedistributionPattern member = make_redistribution_pattern(two_nodes(3, 2));
  ASSERT_EQ(peers(member.gather_sends), (std::vector<int>{2}));
  expect_rect(member.gather_sends[0].rect, 6, 2, 0, 2);
  EXPECT_EQ(peers(member.scatter_recvs), (std::vector<int>{2}));
  EXPECT_TRUE(member.to_model_sends.empty());
  EXPECT_EQ(member.stats.internode_sends, 0);

  // The model rank: code rank 1 (its own node) directly, node 2 as one message.
  const RedistributionPattern model = make_redistribution_pattern(two_nodes(0, 2));
  EXPECT_EQ(peers(model.to_model_recvs), (std::vector<int>{1}));
  ASSERT_EQ(model.relayed_to_model_recvs.size(), 1u);
  EXPECT_EQ(model.relayed_to_model_recvs[0].peer, 2);
  EXPECT_EQ(model.relayed_to_model_recvs[0].members, (std::vector<int>{2, 3}));
  EXPECT_EQ(model.relayed_to_code_sends.size(), 1u);
  EXPECT_EQ(model.stats.to_model_recvs, 2);
}

TEST(RedistributionPattern, BelowTheThresholdEveryPieceGoesDirect) {
  const RedistributionPattern p = make_redistribution_pattern(two_nodes(3, 3));
  EXPECT_EQ(p.route, RedistributionRoute::direct);
  EXPECT_TRUE(p.gather_sends.empty());
  EXPECT_TRUE(p.relay_to_model.empty());
  ASSERT_EQ(peers(p.to_model_sends), (std::vector<int>{0}));
  EXPECT_EQ(p.stats.internode_sends, 1);

  // Asked for explicitly, node_aware relays whatever the threshold.
  PatternInputs in = two_nodes(3, 3);
  in.options.route = RedistributionRoute::node_aware;
  const RedistributionPattern forced = make_redistribution_pattern(in);
  EXPECT_EQ(forced.route, RedistributionRoute::node_aware);
  EXPECT_EQ(peers(forced.gather_sends), (std::vector<int>{2}));
}

}  // namespace
}  // namespace tessera::domain::redistribution_detail
