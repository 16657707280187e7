// The CUDA backend is a plugin (src/backend/cuda_plugin.hpp): libtessera maps no CUDA,
// cuBLAS or NCCL library until a CUDA device is asked for, then loads libtessera_cuda.so
// from beside itself (or from $TESSERA_CUDA_PLUGIN). Neither case needs a GPU.
//
// Two processes, because the load happens once per process (tests/cuda/CMakeLists.txt):
//   CudaPlugin.LoadsOnFirstDeviceRequest       found beside libtessera
//   CudaPlugin.MissingPluginNamesFileAndReason  TESSERA_CUDA_PLUGIN names a missing file

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/train/run_config.hpp"
#include "tessera/train/training_step.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;

::testing::AssertionResult Contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\"\ndoes not contain \"" << needle << "\"";
}

// The shared objects mapped into this process whose file name contains `name`.
std::vector<std::string> mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    const std::size_t slash = line.rfind('/');
    if (slash != std::string::npos && line.find(name, slash) != std::string::npos) found.push_back(line.substr(slash));
  }
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::ostringstream out;
  for (const std::string& line : lines) out << line << "\n";
  return out.str();
}

// What a CPU-only code does: host tensors and a collective over them (the group
// prepared for the host device first), and a coupling plan to a model on one rank (its
// route asks which node each rank is on, never how many GPUs: that question alone would
// load the plugin).
void host_work() {
  Communicator world(MPI_COMM_WORLD);
  Tensor t = Tensor::from_vector<double>({1, 1, 1, 1}, {4});
  world.all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.to_vector<double>()[0], static_cast<double>(world.size()));
  world.prepare_device(Device::host());  // a host group settles nothing with CUDA
  domain::Decomposition code(world, Shape{8, 16});
  domain::Redistribution plan(code, domain::ModelRanks::count(1));
  EXPECT_EQ(plan.model_size(), 1);
  // A trainer told device: host (tessera-run, the C/Fortran trainer) chooses the host
  // without asking CUDA.
  train::RunConfig cfg;
  cfg.device = "host";
  EXPECT_TRUE(train::training_device(cfg, MPI_COMM_WORLD).is_host());
}

// The driver (libcuda) is only checked when it was not mapped before tessera did anything:
// an MPI library whose transports are CUDA-aware (UCX's CUDA module, loaded by MPI_Init on
// a GPU node) maps it itself, and that is not tessera's doing. Found on the first GPU run.
bool driver_mapped_by_mpi() { return !mapped("libcuda.").empty(); }

void expect_no_cuda_library(bool driver_already_mapped) {
  for (const char* name : {"libtessera_cuda", "libcudart", "libcublas", "libnccl", "libcuda."}) {
    if (driver_already_mapped && std::string(name) == "libcuda.") continue;
    EXPECT_TRUE(mapped(name).empty()) << name << " is mapped before any CUDA request:\n" << joined(mapped(name));
  }
}

TEST(CudaPlugin, LoadsOnFirstDeviceRequest) {
  ASSERT_TRUE(cuda_backend_built());
  const bool driver_already_mapped = driver_mapped_by_mpi();
  host_work();
  expect_no_cuda_library(driver_already_mapped);

  // The first device question loads the plugin, and with it the CUDA runtime.
  const int count = cuda_device_count();
  EXPECT_FALSE(mapped("libtessera_cuda.so").empty());
  EXPECT_FALSE(mapped("libcudart").empty());
  if (count == 0) {
    EXPECT_TRUE(Contains(cuda_unavailable_reason(), "cudaGetDeviceCount"));
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
  }
  EXPECT_TRUE(Contains(cuda_library_versions(), "CUDA runtime"));
}

TEST(CudaPlugin, MissingPluginNamesFileAndReason) {
  const char* path = std::getenv("TESSERA_CUDA_PLUGIN");
  ASSERT_NE(path, nullptr) << "run with TESSERA_CUDA_PLUGIN set to a missing file (tests/cuda/CMakeLists.txt)";
  const bool driver_already_mapped = driver_mapped_by_mpi();
  host_work();

  // The queries answer "no device" and say why; a device request is an error naming the
  // file and the dynamic loader's reason.
  EXPECT_EQ(cuda_device_count(), 0);
  const std::string reason = cuda_unavailable_reason();
  EXPECT_TRUE(Contains(reason, path));
  EXPECT_TRUE(Contains(reason, "No such file or directory"));
  EXPECT_TRUE(Contains(cuda_library_versions(), path));
  try {
    Tensor t = Tensor::zeros({4}, DType::f32, Device::cuda(0));
    ADD_FAILURE() << "a CUDA tensor was made without the plugin: " << t.str();
  } catch (const UnsupportedError& error) {
    EXPECT_TRUE(Contains(error.what(), "a CUDA device was requested"));
    EXPECT_TRUE(Contains(error.what(), path));
    EXPECT_TRUE(Contains(error.what(), "No such file or directory"));
  }
  expect_no_cuda_library(driver_already_mapped);
}

}  // namespace
