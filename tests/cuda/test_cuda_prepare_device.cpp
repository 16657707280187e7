// Communicator::prepare_device on a CUDA device settles, before any collective, whether
// the group's CUDA tensors take NCCL (each rank its own GPU) or host staging (two ranks
// share one); the collectives after it take that path and give the host twin's values.
// Without a GPU every test is skipped (CTest reports Skipped).

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"
#include "tessera/version.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;

Device my_gpu() { return Device::cuda(world_rank() % cuda_device_count()); }

TEST(CudaPrepareDevice, CollectivesAfterItTakeTheSettledPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  Communicator comm(MPI_COMM_WORLD);
  comm.prepare_device(my_gpu());
  const std::int64_t settled_calls = comm.stats().mpi_calls;
  Tensor host = Tensor::from_vector<double>({1.0 + world_rank(), 2.0}, {2});
  Tensor device = host.to(my_gpu());
  comm.all_reduce(host);
  comm.all_reduce(device);
  EXPECT_EQ(device.to(Device::host()).to_vector<double>(), host.to_vector<double>());
  const bool own_gpu = cuda_device_count() >= world_size();
  if (TESSERA_HAVE_NCCL && world_size() > 1 && own_gpu) {
    // NCCL: the device all-reduce is one NCCL call; only the host one used MPI.
    EXPECT_EQ(comm.stats().nccl_calls, 1);
    EXPECT_EQ(comm.stats().mpi_calls, settled_calls + 1);
  } else {
    EXPECT_EQ(comm.stats().nccl_calls, 0);
  }
}

TEST(CudaPrepareDevice, AutoIndexIsRefusedOnEveryRank) {
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  if (world_size() < 2) GTEST_SKIP() << "a group of one prepares nothing";
  Communicator comm(MPI_COMM_WORLD);
  EXPECT_THROW(comm.prepare_device(Device::cuda()), InvalidArgument);
}

}  // namespace
