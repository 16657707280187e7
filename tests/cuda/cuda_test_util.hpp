#pragma once
// What the CUDA twin suites share: ranks, the fixture that picks this rank's device (or
// skips), seeded host data, and comparisons of a device result with its host twin.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/backend.hpp"
#include "tessera/tensor.hpp"

namespace tessera::cuda_test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The fixture of the device twin suites: device_ is this rank's GPU (world rank modulo
// the devices); without a GPU every test is skipped with the runtime's reason.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int count = cuda_device_count();
    if (count == 0) GTEST_SKIP() << cuda_unavailable_reason();
    device_ = Device::cuda(world_rank() % count);
  }
  Device device_;
};

// Uniform values in [-scale, scale) from `seed`, f32 or f64, on the host.
inline Tensor random_host(const Shape& shape, DType dtype, unsigned seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = dist(rng);
  if (dtype == DType::f64) return Tensor::from_vector<double>(values, shape);
  return Tensor::from_vector<float>(std::vector<float>(values.begin(), values.end()), shape);
}

inline std::vector<double> doubles(const Tensor& t) {
  const Tensor h = t.to(Device::host()).contiguous();
  if (h.dtype() == DType::f64) return h.to_vector<double>();
  std::vector<double> out;
  for (float v : h.to_vector<float>()) out.push_back(v);
  return out;
}

// Every element within rtol * max(1, max |host|) of the host twin (a relative tolerance
// with an absolute floor for values near zero).
inline void expect_close(const Tensor& device, const Tensor& host, double rtol, const std::string& what) {
  ASSERT_EQ(device.shape(), host.shape()) << what;
  const auto d = doubles(device), h = doubles(host);
  double scale = 0;
  for (double v : h) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < d.size(); ++i) {
    ASSERT_NEAR(d[i], h[i], rtol * std::max(1.0, scale)) << what << " element " << i;
  }
}

inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ha = a.to(Device::host()).contiguous(), hb = b.to(Device::host()).contiguous();
  return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

}  // namespace tessera::cuda_test
