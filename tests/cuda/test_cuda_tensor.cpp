// CUDA tensors through the public API: memory, copies (contiguous, strided, across
// devices) and collectives. Every test needs a GPU; without one each is skipped with
// the runtime's reason, so the executable exits 77 and CTest reports it as skipped.
// Each rank uses device rank % count, so the 2-rank run also works on a single GPU.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/tensor.hpp"

namespace {

using tessera::bfloat16;
using tessera::Device;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;

class CudaTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_count_ = tessera::cuda_device_count();
    if (device_count_ == 0) GTEST_SKIP() << tessera::cuda_unavailable_reason();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    device_ = Device::cuda(rank % device_count_);
  }

  int device_count_ = 0;
  Device device_;
};

// 0, 1, 2, ... as T: exact in every dtype for the sizes used here (bf16 holds integers
// up to 256 exactly).
template <class T>
std::vector<T> iota_values(std::int64_t n) {
  std::vector<T> values;
  for (std::int64_t i = 0; i < n; ++i) values.push_back(T(static_cast<float>(i)));
  return values;
}
template <>
std::vector<std::int64_t> iota_values<std::int64_t>(std::int64_t n) {
  std::vector<std::int64_t> values;
  for (std::int64_t i = 0; i < n; ++i) values.push_back(i * 1000003);  // uses the high bytes
  return values;
}

template <class T>
std::vector<double> as_doubles(const std::vector<T>& values) {
  std::vector<double> out;
  for (const T& v : values) out.push_back(static_cast<double>(static_cast<float>(v)));
  return out;
}
template <>
std::vector<double> as_doubles<double>(const std::vector<double>& values) {
  return values;
}
template <>
std::vector<double> as_doubles<std::int64_t>(const std::vector<std::int64_t>& values) {
  return {values.begin(), values.end()};
}

// Element (i, j, k) of a row-major [d0, d1, d2] tensor holding iota_values.
template <class T>
std::vector<T> narrowed_reference(const std::vector<T>& full, const Shape& shape, int dim,
                                  std::int64_t start, std::int64_t length) {
  std::vector<T> out;
  for (std::int64_t i = 0; i < shape[0]; ++i) {
    for (std::int64_t j = 0; j < shape[1]; ++j) {
      for (std::int64_t k = 0; k < shape[2]; ++k) {
        const std::int64_t index[3] = {i, j, k};
        if (index[dim] < start || index[dim] >= start + length) continue;
        out.push_back(full[static_cast<std::size_t>((i * shape[1] + j) * shape[2] + k)]);
      }
    }
  }
  return out;
}

template <class T>
void expect_round_trip(Device device) {
  const Shape shape{3, 5, 7};
  const auto values = iota_values<T>(3 * 5 * 7);
  const Tensor host = Tensor::from_vector(values, shape);
  const Tensor on_device = host.to(device);
  EXPECT_TRUE(on_device.device() == device) << on_device.str();
  EXPECT_EQ(on_device.shape(), shape);
  EXPECT_EQ(on_device.dtype(), tessera::dtype_of<T>);
  EXPECT_TRUE(on_device.is_contiguous());
  const Tensor back = on_device.to(Device::host());
  EXPECT_TRUE(back.device().is_host());
  EXPECT_EQ(as_doubles(back.to_vector<T>()), as_doubles(values));
}

TEST_F(CudaTensorTest, HostDeviceHostRoundTripForEveryDtype) {
  expect_round_trip<float>(device_);
  expect_round_trip<double>(device_);
  expect_round_trip<bfloat16>(device_);
  expect_round_trip<std::int64_t>(device_);
}

TEST_F(CudaTensorTest, ZerosAndFillZero) {
  const Tensor zeros = Tensor::zeros({4, 33}, DType::f64, device_);
  EXPECT_EQ(zeros.to_vector<double>(), std::vector<double>(4 * 33, 0.0));

  Tensor t = Tensor::from_vector(iota_values<float>(4 * 33), {4, 33}).to(device_);
  t.fill_zero();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4 * 33, 0.0f));

  // A strided view: only its own elements are zeroed.
  Tensor u = Tensor::from_vector(iota_values<float>(4 * 6), {4, 6}).to(device_);
  Tensor middle = u.narrow(1, 2, 2);
  ASSERT_FALSE(middle.is_contiguous());
  middle.fill_zero();
  auto expected = iota_values<float>(4 * 6);
  for (int i = 0; i < 4; ++i) expected[i * 6 + 2] = expected[i * 6 + 3] = 0.0f;
  EXPECT_EQ(u.to_vector<float>(), expected);
}

template <class T>
void expect_narrow_contiguous(Device device) {
  const Shape shape{4, 6, 5};
  const auto values = iota_values<T>(4 * 6 * 5);
  const Tensor full = Tensor::from_vector(values, shape).to(device);
  for (int dim = 0; dim < 3; ++dim) {
    const Tensor narrow = full.narrow(dim, 1, 2);
    const Tensor packed = narrow.contiguous();  // the device copy_strided kernel
    EXPECT_TRUE(packed.is_contiguous());
    EXPECT_TRUE(packed.device() == device);
    EXPECT_EQ(as_doubles(packed.to(Device::host()).template to_vector<T>()),
              as_doubles(narrowed_reference(values, shape, dim, 1, 2)))
        << tessera::dtype_name(tessera::dtype_of<T>) << " narrow along dim " << dim;
  }
}

TEST_F(CudaTensorTest, StridedNarrowCopiedToContiguousOnDevice) {
  expect_narrow_contiguous<float>(device_);         // 4-byte elements
  expect_narrow_contiguous<double>(device_);        // 8-byte elements
  expect_narrow_contiguous<bfloat16>(device_);      // 2-byte elements
  expect_narrow_contiguous<std::int64_t>(device_);  // 8-byte, high bytes in use
}

TEST_F(CudaTensorTest, LargeStridedCopyCoversEveryElement) {
  // More elements than one grid of the copy kernel covers in a single stride.
  const std::int64_t rows = 2048, cols = 1031;
  std::vector<float> values(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 65521);
  const Tensor full = Tensor::from_vector(values, {rows, cols}).to(device_);
  const Tensor packed = full.narrow(1, 3, cols - 6).contiguous();
  const auto out = packed.to_vector<float>();
  ASSERT_EQ(out.size(), static_cast<std::size_t>(rows * (cols - 6)));
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols - 6; ++j) {
      if (out[static_cast<std::size_t>(i * (cols - 6) + j)] !=
          values[static_cast<std::size_t>(i * cols + j + 3)]) {
        ++mismatches;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(CudaTensorTest, CopyFromStridedSourcesAcrossDevices) {
  const Shape shape{5, 8};
  const auto values = iota_values<double>(5 * 8);
  const auto expected = narrowed_reference(values, {5, 8, 1}, 1, 2, 4);

  // host (strided) -> device
  const Tensor host_full = Tensor::from_vector(values, shape);
  Tensor on_device = Tensor::empty({5, 4}, DType::f64, device_);
  on_device.copy_from(host_full.narrow(1, 2, 4));
  EXPECT_EQ(on_device.to_vector<double>(), expected);

  // device (strided) -> host
  const Tensor device_full = host_full.to(device_);
  Tensor on_host = Tensor::empty({5, 4}, DType::f64);
  on_host.copy_from(device_full.narrow(1, 2, 4));
  EXPECT_EQ(on_host.to_vector<double>(), expected);

  // device (strided) -> device (strided): the destination is a window of a zero tensor.
  Tensor target = Tensor::zeros({5, 8}, DType::f64, device_);
  Tensor window = target.narrow(1, 4, 4);
  window.copy_from(device_full.narrow(1, 2, 4));
  std::vector<double> target_expected(5 * 8, 0.0);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) target_expected[i * 8 + 4 + j] = values[i * 8 + 2 + j];
  }
  EXPECT_EQ(target.to_vector<double>(), target_expected);

  // host (strided) -> device (strided)
  Tensor target2 = Tensor::zeros({5, 8}, DType::f64, device_);
  Tensor window2 = target2.narrow(1, 4, 4);
  window2.copy_from(host_full.narrow(1, 2, 4));
  EXPECT_EQ(target2.to_vector<double>(), target_expected);
}

TEST_F(CudaTensorTest, CopyFromBetweenTwoDevices) {
  if (device_count_ < 2) GTEST_SKIP() << "needs two CUDA devices; " << device_count_ << " visible";
  const Device other = Device::cuda((device_.index + 1) % device_count_);
  const auto values = iota_values<float>(6 * 7);
  const Tensor source = Tensor::from_vector(values, {6, 7}).to(device_);
  Tensor destination = Tensor::empty({6, 3}, DType::f32, other);
  destination.copy_from(source.narrow(1, 2, 3));
  EXPECT_TRUE(destination.device() == other);
  EXPECT_EQ(destination.to_vector<float>(), narrowed_reference(values, {6, 7, 1}, 1, 2, 3));
}

TEST_F(CudaTensorTest, AllReduceSumOfACudaTensor) {
  tessera::Communicator comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), size = comm.size();
  constexpr std::int64_t n = 37;

  // Rank r contributes (r + 1) * 10 + i: the sum is 10 * size(size+1)/2 + size * i,
  // exact in f32 and f64.
  std::vector<float> f32_values;
  std::vector<double> f64_values;
  std::vector<std::int64_t> i64_values;
  for (std::int64_t i = 0; i < n; ++i) {
    f32_values.push_back(static_cast<float>((rank + 1) * 10 + i));
    f64_values.push_back(static_cast<double>((rank + 1) * 10 + i));
    i64_values.push_back((std::int64_t{rank} + 1) * 10'000'000'000 + i);
  }
  Tensor f32 = Tensor::from_vector(f32_values, {n}).to(device_);
  Tensor f64 = Tensor::from_vector(f64_values, {n}).to(device_);
  Tensor i64 = Tensor::from_vector(i64_values, {n}).to(device_);
  comm.all_reduce(f32);
  comm.all_reduce(f64);
  comm.all_reduce(i64);
  EXPECT_TRUE(f32.device() == device_);
  EXPECT_TRUE(f64.device() == device_);

  const std::int64_t rank_sum = std::int64_t{size} * (size + 1) / 2;
  std::vector<float> f32_expected;
  std::vector<double> f64_expected;
  std::vector<std::int64_t> i64_expected;
  for (std::int64_t i = 0; i < n; ++i) {
    f32_expected.push_back(static_cast<float>(10 * rank_sum + size * i));
    f64_expected.push_back(static_cast<double>(10 * rank_sum + size * i));
    i64_expected.push_back(rank_sum * 10'000'000'000 + size * i);
  }
  EXPECT_EQ(f32.to_vector<float>(), f32_expected);
  EXPECT_EQ(f64.to_vector<double>(), f64_expected);
  EXPECT_EQ(i64.to_vector<std::int64_t>(), i64_expected);
}

TEST_F(CudaTensorTest, AllReduceAvgOfAStridedSourceMadeContiguous) {
  tessera::Communicator comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), size = comm.size();
  // Collectives take contiguous tensors: a strided device view is packed first.
  std::vector<double> values;
  for (int i = 0; i < 4 * 6; ++i) values.push_back(static_cast<double>(rank * 100 + i));
  const Tensor full = Tensor::from_vector(values, {4, 6}).to(device_);
  Tensor packed = full.narrow(1, 1, 3).contiguous();
  comm.all_reduce(packed, tessera::ReduceOp::avg);
  // mean over ranks of rank * 100 + i is (size - 1) * 50 + i.
  std::vector<double> expected;
  for (int r = 0; r < 4; ++r) {
    for (int c = 1; c < 4; ++c) expected.push_back((size - 1) * 50.0 + r * 6 + c);
  }
  EXPECT_EQ(packed.to_vector<double>(), expected);
}

}  // namespace
