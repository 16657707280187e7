// The device twins of the embedding options (tests/nn/test_embedding.cpp,
// tests/tp/test_tp_embedding_options.cpp): the CUDA row-norm and rescale kernels of
// max_norm for every norm_type, the scatter-add with padding_idx and
// scale_grad_by_freq, and ParallelEmbedding's all-reduce of partial norms on device
// tensors, each compared with the host backend.
//
// Every test needs a GPU. Without one each test is skipped with the runtime's reason,
// and the executable exits 77 (CTest: skipped).

#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/sharding.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;

constexpr double kInf = std::numeric_limits<double>::infinity();

class CudaEmbeddingOptions : public DeviceTest {};

// Ids with repeats over a 12-row table; row 5 is never looked up.
Tensor batch_ids() { return Tensor::from_vector<std::int64_t>({3, 0, 11, 3, 6, 1, 3, 2, 6, 4, 9, 10}, {3, 4}); }

}  // namespace

TEST_F(CudaEmbeddingOptions, SerialOptionsMatchHostForEveryNormType) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double p : {2.0, 1.0, 3.0, 0.5, kInf, -kInf, 0.0}) {
      nn::EmbeddingOptions o;
      o.max_norm = p == 0.0 ? 100.0 : 0.3;  // every row above it (a count of 100 is never reached)
      o.norm_type = p;
      o.padding_idx = 6;
      o.scale_grad_by_freq = true;
      nn::Embedding host(12, 40, o, dtype);
      nn::Embedding device(12, 40, o, dtype, device_);
      host.weight.value.copy_from(random_host({12, 40}, dtype, 31));
      device.weight.value.copy_from(host.weight.value.to(device_));
      const Tensor ids = batch_ids();
      const Tensor dy = random_host({3, 4, 40}, dtype, 32);
      const Tensor y = host.forward(ids);
      host.backward(dy);
      const Tensor dy_device = dy.to(device_);
      const Tensor y_device = device.forward(ids.to(device_));
      device.backward(dy_device);
      const double rtol = dtype == DType::f32 ? 1e-6 : 1e-13;
      const std::string what = std::string(dtype_name(dtype)) + " norm_type " + std::to_string(p);
      expect_close(y_device, y, rtol, "output, " + what);
      expect_close(device.weight.value, host.weight.value, rtol, "renormalised table, " + what);
      expect_close(device.weight.grad, host.weight.grad, rtol, "gradient, " + what);
    }
  }
}

TEST_F(CudaEmbeddingOptions, ParallelEmbeddingCombinesDevicePartialNorms) {
  Communicator tp(MPI_COMM_WORLD);
  nn::EmbeddingOptions o;
  o.max_norm = 1.0;
  nn::Embedding serial(12, 8 * tp.size(), o);
  serial.weight.value.copy_from(random_host({12, 8 * tp.size()}, DType::f32, 33));
  nn::Embedding serial_device(12, 8 * tp.size(), o, DType::f32, device_);
  serial_device.weight.value.copy_from(serial.weight.value.to(device_));
  auto by_dim = tp::ParallelEmbedding::from_serial(serial_device, tp);
  const Tensor ids = batch_ids();
  const Tensor y = serial.forward(ids);
  const Tensor y_device = by_dim->forward(ids.to(device_));
  expect_close(y_device, y, 1e-6, "ParallelEmbedding output");
  expect_close(by_dim->master_weight(), serial.weight.value, 1e-6, "ParallelEmbedding renormalised table");
}
