// Deliberately failing and skipping tests for the MPI test main's self-test
// (check_main_agreement.cmake runs this executable with filters and checks the exit
// codes and the report). Not registered as a test on its own.

#include <gtest/gtest.h>

#include "mpi_test.hpp"

TEST(SelfTest, Passes) { EXPECT_EQ(1 + 1, 2); }

TEST(SelfTest, FailsOnTheLastRankOnly) {
  EXPECT_NE(tessera::testing::world_rank(), tessera::testing::world_size() - 1) << "deliberate failure";
}

TEST(SelfTest, SkippedEverywhere) { GTEST_SKIP() << "deliberately skipped"; }
