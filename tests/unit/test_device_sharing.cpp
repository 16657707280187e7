// Shared-GPU detection (src/comm/device_sharing.hpp): the rule that sends a group's CUDA
// collectives through MPI staging when two of its ranks share a GPU, which NCCL refuses.
// The UUID query needs a GPU (tests/cuda/test_cuda_comm.cpp runs it); the comparison is
// tested here.

#include <gtest/gtest.h>

#include "comm/device_sharing.hpp"

namespace {

using tessera::detail::first_shared_device;

TEST(DeviceSharing, DistinctDevicesShareNothing) {
  EXPECT_FALSE(first_shared_device({}).found());
  EXPECT_FALSE(first_shared_device({"a"}).found());
  EXPECT_FALSE(first_shared_device({"a", "b", "c", "d"}).found());
}

TEST(DeviceSharing, TheFirstRepeatedDeviceNamesBothRanksInRankOrder) {
  const auto one_gpu = first_shared_device({"gpu0", "gpu0"});
  EXPECT_EQ(one_gpu.first, 0);
  EXPECT_EQ(one_gpu.second, 1);
  // Four ranks on two GPUs, round-robin: rank 2 is the first to repeat (rank 0's GPU).
  const auto round_robin = first_shared_device({"gpu0", "gpu1", "gpu0", "gpu1"});
  EXPECT_EQ(round_robin.first, 0);
  EXPECT_EQ(round_robin.second, 2);
  const auto later = first_shared_device({"a", "b", "c", "b"});
  EXPECT_EQ(later.first, 1);
  EXPECT_EQ(later.second, 3);
}

}  // namespace
