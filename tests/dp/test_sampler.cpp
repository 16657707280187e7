// The sampler contract: samples sharded by the dp coordinate only, so ranks that differ
// only in tp or domain read identical batches; dp ranks disjoint within the dataset and
// covering it each epoch; per-epoch shuffles a pure function of (seed, epoch); padding
// (repeat from the start) or drop_last for datasets the dp size does not divide.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "mpi_test.hpp"
#include "tessera/dp/sampler.hpp"

using namespace tessera;
using tessera::testing::all_gather_strings;
using tessera::testing::world_size;

namespace {

std::string join(const std::vector<std::int64_t>& v) {
  std::ostringstream s;
  for (std::int64_t x : v) s << x << ",";
  return s.str();
}

std::vector<std::int64_t> parse(const std::string& text) {
  std::vector<std::int64_t> v;
  std::istringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) v.push_back(std::stoll(item));
  return v;
}

ParallelismConfig mesh_config() {
  if (world_size() == 8) return {DataParallelMode::ddp, 2, 2};  // dp 2
  if (world_size() == 4) return {DataParallelMode::ddp, 2, 1};  // dp 2
  return {DataParallelMode::none, 1, 1};
}

}  // namespace

TEST(SamplerContract, TpAndDomainPeersIdenticalDpRanksDisjointFullCoverage) {
  Mesh mesh(MPI_COMM_WORLD, mesh_config());
  const int P = mesh.dp_size();
  constexpr std::int64_t n = 23;  // does not divide by 2
  for (bool drop_last : {false, true}) {
    dp::DistributedSampler sampler(n, mesh, {.shuffle = true, .seed = 5, .drop_last = drop_last});
    for (std::int64_t epoch : {0, 1}) {
      sampler.set_epoch(epoch);
      const auto mine = sampler.indices();
      ASSERT_EQ(static_cast<std::int64_t>(mine.size()), sampler.num_samples());
      // One all-gather of every rank's (dp coordinate, indices).
      const auto all = all_gather_strings(std::to_string(mesh.coords().dp) + ":" + join(mine));
      std::vector<std::vector<std::int64_t>> by_dp(P);
      for (int g = 0; g < mesh.world_size(); ++g) {
        const std::string& s = all[g];
        const int dp = std::stoi(s.substr(0, s.find(':')));
        const auto ids = parse(s.substr(s.find(':') + 1));
        EXPECT_EQ(dp, mesh_coords_of(g, mesh.tp_size(), mesh.domain_size()).dp);
        if (by_dp[dp].empty()) {
          by_dp[dp] = ids;
        } else {
          EXPECT_EQ(ids, by_dp[dp]) << "rank " << g << " differs from a tp/domain peer (epoch " << epoch << ")";
        }
      }
      std::vector<std::int64_t> seen;
      for (const auto& ids : by_dp) seen.insert(seen.end(), ids.begin(), ids.end());
      std::vector<std::int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      const std::int64_t distinct = static_cast<std::int64_t>(std::set<std::int64_t>(seen.begin(), seen.end()).size());
      if (drop_last) {
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), n / P * P);
        EXPECT_EQ(distinct, n / P * P) << "dp ranks must be disjoint";
      } else {
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), (n + P - 1) / P * P);
        EXPECT_EQ(distinct, n) << "every sample each epoch";
        EXPECT_EQ(sorted.front(), 0);
        EXPECT_EQ(sorted.back(), n - 1);
      }
    }
  }
}

TEST(Sampler, ShuffleIsAPureFunctionOfSeedAndEpoch) {
  dp::DistributedSampler a(100, DataParallelCoords{0, 1}, {.shuffle = true, .seed = 3});
  dp::DistributedSampler b(100, DataParallelCoords{0, 1}, {.shuffle = true, .seed = 3});
  dp::DistributedSampler c(100, DataParallelCoords{0, 1}, {.shuffle = true, .seed = 4});
  EXPECT_EQ(a.epoch_order(), b.epoch_order());
  EXPECT_NE(a.epoch_order(), c.epoch_order());
  const auto e0 = a.epoch_order();
  a.set_epoch(1);
  EXPECT_NE(a.epoch_order(), e0);
  auto sorted = a.epoch_order();
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota) << "a permutation";
  dp::DistributedSampler plain(5, DataParallelCoords{0, 1}, {.shuffle = false});
  EXPECT_EQ(plain.indices(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, PaddingRepeatsFromTheStartAndDropLastTruncates) {
  // 10 samples over 4 dp ranks, no shuffle: padded order 0..9, 0, 1 (as PyTorch).
  std::vector<std::vector<std::int64_t>> padded, dropped;
  for (int r = 0; r < 4; ++r) {
    padded.push_back(dp::DistributedSampler(10, DataParallelCoords{r, 4}, {.shuffle = false}).indices());
    dropped.push_back(dp::DistributedSampler(10, DataParallelCoords{r, 4}, {.shuffle = false, .drop_last = true}).indices());
  }
  EXPECT_EQ(padded[0], (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(padded[1], (std::vector<std::int64_t>{1, 5, 9}));
  EXPECT_EQ(padded[2], (std::vector<std::int64_t>{2, 6, 0}));
  EXPECT_EQ(padded[3], (std::vector<std::int64_t>{3, 7, 1}));
  EXPECT_EQ(dropped[0], (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(dropped[3], (std::vector<std::int64_t>{3, 7}));
  // Fewer samples than ranks: padding repeats the order as often as needed.
  EXPECT_EQ(dp::DistributedSampler(2, DataParallelCoords{4, 5}, {.shuffle = false}).indices(),
            (std::vector<std::int64_t>{0}));
  EXPECT_EQ(dp::DistributedSampler(2, DataParallelCoords{3, 5}, {.shuffle = false, .drop_last = true}).num_samples(), 0);
  // Batches of this rank's indices.
  dp::DistributedSampler s(10, DataParallelCoords{1, 2}, {.shuffle = false});
  EXPECT_EQ(s.num_batches(2), 3);
  EXPECT_EQ(s.num_batches(2, /*drop_last_batch=*/true), 2);
  EXPECT_EQ(s.batch(2, 2), (std::vector<std::int64_t>{9}));
  EXPECT_THROW(s.batch(3, 2), InvalidArgument);
  EXPECT_THROW(dp::DistributedSampler(10, DataParallelCoords{2, 2}), InvalidArgument);
  EXPECT_THROW(dp::DistributedSampler(0, DataParallelCoords{0, 1}), InvalidArgument);
  EXPECT_THROW(dp::DistributedSampler(-1, DataParallelCoords{0, 1}, {.drop_last = true}), InvalidArgument);
}
