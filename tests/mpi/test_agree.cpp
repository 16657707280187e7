// agree_on_success: a failure on any rank becomes the same error on every rank.

#include <gtest/gtest.h>

#include "mpi_test.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"

using namespace tessera;
using tessera::testing::all_gather_strings;
using tessera::testing::world_rank;
using tessera::testing::world_size;

TEST(Agree, SuccessEverywhereDoesNotThrow) {
  int runs = 0;
  EXPECT_NO_THROW(agree_on_success(MPI_COMM_WORLD, [&] { ++runs; }));
  EXPECT_EQ(runs, 1);
}

TEST(Agree, OneFailingRankFailsEveryRankWithItsError) {
  const int bad = world_size() - 1;
  std::string message;
  try {
    agree_on_success(MPI_COMM_WORLD, [&] {
      if (world_rank() == bad) throw ShapeError("dataset 'layers.0.weight' has shape [4, 8]");
    });
    ADD_FAILURE() << "no throw on rank " << world_rank();
  } catch (const ShapeError& e) {
    message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::shape);
  }
  EXPECT_EQ(message, "dataset 'layers.0.weight' has shape [4, 8] (on rank " + std::to_string(bad) +
                         " of " + std::to_string(world_size()) + ")");
}

TEST(Agree, LowestFailingRankWinsAndForeignExceptionsBecomeInternal) {
  std::string message;
  try {
    agree_on_success(MPI_COMM_WORLD, [&] { throw std::runtime_error("rank " + std::to_string(world_rank())); });
    ADD_FAILURE();
  } catch (const InternalError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "rank 0 (on rank 0 of " + std::to_string(world_size()) + ")");
  const auto all = all_gather_strings(message);
  for (const auto& m : all) EXPECT_EQ(m, all[0]);
}

TEST(Agree, SameOnAllRanksIsAgreed) {
  EXPECT_TRUE(same_on_all_ranks(MPI_COMM_WORLD, "tensor 2, domain 2"));
  const std::string mine = world_rank() == world_size() - 1 ? "odd one" : "the rest";
  EXPECT_EQ(same_on_all_ranks(MPI_COMM_WORLD, mine), world_size() == 1);
  try {
    require_same_on_all_ranks(MPI_COMM_WORLD, mine, "plans differ");
    EXPECT_EQ(world_size(), 1);
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "plans differ");
  }
}
