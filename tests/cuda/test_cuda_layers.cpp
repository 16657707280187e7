// The CUDA twins of the host layer tests: every op, functional layer, tensor-parallel
// layer, the vocab-parallel cross-entropy, the NCCL collectives and the initialiser run
// on device tensors and are compared with the host backend on the same inputs (the
// host results are the ground truth the host suites already verify).
//
// Every test needs a GPU. Without one each test is skipped with the runtime's reason,
// so the executable exits 77 and CTest reports Skipped, never Passed. Registered at 1
// and 2 ranks; rank r uses device r % count. Two ranks may share one GPU: NCCL refuses
// such a group, so the communicator stages their CUDA collectives through MPI instead,
// and the collective tests run either way.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/init.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/nn/swiglu.hpp"
#include "tessera/ops.hpp"
#include "tessera/tensor.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/linear.hpp"

namespace {

using namespace tessera;
namespace F = tessera::nn::functional;

using namespace tessera::cuda_test;

class CudaLayers : public ::testing::Test {
 protected:
  void SetUp() override {
    const int count = cuda_device_count();
    if (count == 0) GTEST_SKIP() << cuda_unavailable_reason();
    device_ = Device::cuda(world_rank() % count);
    devices_ = count;
  }
  Tensor dev(const Tensor& host) const { return host.to(device_); }
  // NCCL needs a distinct device per rank of a communicator; otherwise MPI staging.
  bool one_device_per_rank() const { return devices_ >= world_size(); }

  Device device_;
  int devices_ = 0;
};

TEST_F(CudaLayers, GemmMatchesHostForEveryTransposeAndDtype) {
  for (DType dtype : {DType::f32, DType::f64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_host(ta ? Shape{7, 5} : Shape{5, 7}, dtype, 1);
        Tensor b = random_host(tb ? Shape{3, 7} : Shape{7, 3}, dtype, 2);
        Tensor c = random_host({5, 3}, dtype, 3);
        Tensor dc = dev(c);
        ops::gemm(a, ta, b, tb, c, 0.5, 2.0);
        ops::gemm(dev(a), ta, dev(b), tb, dc, 0.5, 2.0);
        expect_close(dc, c, dtype == DType::f32 ? 1e-5 : 1e-12, "gemm");
      }
}

TEST_F(CudaLayers, Bf16GemmAccumulatesInF32) {
  Tensor a = random_host({6, 8}, DType::f32, 4), b = random_host({8, 5}, DType::f32, 5);
  std::vector<bfloat16> ab, bb;
  std::vector<float> ar, br;  // the bf16-rounded inputs, as f32
  for (float v : a.to_vector<float>()) ab.emplace_back(v), ar.push_back(static_cast<float>(ab.back()));
  for (float v : b.to_vector<float>()) bb.emplace_back(v), br.push_back(static_cast<float>(bb.back()));
  Tensor ref = ops::matmul(Tensor::from_vector<float>(ar, {6, 8}), Tensor::from_vector<float>(br, {8, 5}));
  Tensor out = Tensor::zeros({6, 5}, DType::f32, device_);
  ops::gemm(dev(Tensor::from_vector<bfloat16>(ab, {6, 8})), false, dev(Tensor::from_vector<bfloat16>(bb, {8, 5})),
            false, out);
  expect_close(out, ref, 1e-5, "bf16 gemm, f32 out");
}

TEST_F(CudaLayers, BlasLikeOpsMatchHost) {
  Tensor x = random_host({4, 6, 3}, DType::f32, 6), y = random_host({4, 6, 3}, DType::f32, 7);
  Tensor dy = dev(y);
  ops::axpy(0.25, x, y);
  ops::axpy(0.25, dev(x), dy);
  expect_close(dy, y, 1e-6, "axpy");
  ops::scale(y, -1.5);
  ops::scale(dy, -1.5);
  expect_close(dy, y, 1e-6, "scale");
  Tensor bias = random_host({6}, DType::f32, 8);
  ops::add_bias(y, bias, 1);
  ops::add_bias(dy, dev(bias), 1);
  expect_close(dy, y, 1e-6, "add_bias");
  Tensor g = random_host({3}, DType::f32, 9), dg = dev(g);
  ops::accumulate_bias_grad(y, g, -1);
  ops::accumulate_bias_grad(dy, dg, -1);
  expect_close(dg, g, 1e-5, "accumulate_bias_grad");
  EXPECT_NEAR(ops::sum(dy), ops::sum(y), 1e-4);
  EXPECT_NEAR(ops::dot(dy, dev(x)), ops::dot(y, x), 1e-4);
}

TEST_F(CudaLayers, LinearForwardBackwardMatchesHost) {
  Tensor x = random_host({2, 3, 8}, DType::f32, 10), w = random_host({5, 8}, DType::f32, 11);
  Tensor b = random_host({5}, DType::f32, 12), dy = random_host({2, 3, 5}, DType::f32, 13);
  Tensor gw = Tensor::zeros({5, 8}, DType::f32), gb = Tensor::zeros({5}, DType::f32);
  Tensor dgw = dev(gw), dgb = dev(gb);
  expect_close(F::linear(dev(x), dev(w), dev(b)), F::linear(x, w, b), 1e-5, "linear");
  Tensor dx = F::linear_backward(dy, x, w, gw, gb);
  Tensor ddx = F::linear_backward(dev(dy), dev(x), dev(w), dgw, dgb);
  expect_close(ddx, dx, 1e-5, "linear dx");
  expect_close(dgw, gw, 1e-5, "linear dW");
  expect_close(dgb, gb, 1e-5, "linear db");
}

TEST_F(CudaLayers, ActivationsAndSwigluMatchHost) {
  Tensor x = random_host({4, 9}, DType::f64, 14, 4.0), dy = random_host({4, 9}, DType::f64, 15);
  expect_close(F::gelu(dev(x)), F::gelu(x), 1e-13, "gelu");
  expect_close(F::silu(dev(x)), F::silu(x), 1e-13, "silu");
  expect_close(F::gelu_backward(dev(dy), dev(x)), F::gelu_backward(dy, x), 1e-13, "gelu'");
  expect_close(F::silu_backward(dev(dy), dev(x)), F::silu_backward(dy, x), 1e-13, "silu'");
  Tensor up = random_host({4, 9}, DType::f64, 16);
  expect_close(F::swiglu(dev(x), dev(up)), F::swiglu(x, up), 1e-13, "swiglu");
  auto host = F::swiglu_backward(dy, x, up);
  auto device = F::swiglu_backward(dev(dy), dev(x), dev(up));
  expect_close(device.gate, host.gate, 1e-13, "swiglu dgate");
  expect_close(device.up, host.up, 1e-13, "swiglu dup");
}

TEST_F(CudaLayers, NormsForwardBackwardMatchHost) {
  Tensor x = random_host({5, 300}, DType::f32, 17, 3.0), dy = random_host({5, 300}, DType::f32, 18);
  Tensor gamma = random_host({300}, DType::f32, 19), beta = random_host({300}, DType::f32, 20);
  Tensor mean, rstd, dmean, drstd;
  Tensor y = F::layer_norm(x, gamma, beta, 1e-5, mean, rstd);
  Tensor dyv = F::layer_norm(dev(x), dev(gamma), dev(beta), 1e-5, dmean, drstd);
  expect_close(dyv, y, 1e-5, "layer_norm");
  expect_close(dmean, mean, 1e-6, "mean");
  expect_close(drstd, rstd, 1e-5, "rstd");
  Tensor gg = Tensor::zeros({300}, DType::f32), gb = Tensor::zeros({300}, DType::f32);
  Tensor dgg = dev(gg), dgb = dev(gb);
  Tensor dx = F::layer_norm_backward(dy, x, gamma, mean, rstd, gg, gb);
  Tensor ddx = F::layer_norm_backward(dev(dy), dev(x), dev(gamma), dmean, drstd, dgg, dgb);
  expect_close(ddx, dx, 1e-5, "layer_norm dx");
  expect_close(dgg, gg, 1e-5, "layer_norm dgamma");
  expect_close(dgb, gb, 1e-5, "layer_norm dbeta");

  Tensor r, dr;
  expect_close(F::rms_norm(dev(x), dev(gamma), 1e-6, dr), F::rms_norm(x, gamma, 1e-6, r), 1e-5, "rms_norm");
  Tensor rg = Tensor::zeros({300}, DType::f32), drg = dev(rg);
  expect_close(F::rms_norm_backward(dev(dy), dev(x), dev(gamma), dr, drg), F::rms_norm_backward(dy, x, gamma, r, rg),
               1e-5, "rms_norm dx");
  expect_close(drg, rg, 1e-5, "rms_norm dgamma");
}

TEST_F(CudaLayers, EmbeddingGatherAndScatterAddMatchHostWithTheVocabMask) {
  Tensor table = random_host({6, 4}, DType::f32, 21);
  Tensor ids = Tensor::from_vector<std::int64_t>({3, 5, 9, 4, 3, 2}, {2, 3});
  // Rows [3, 9) of the global table: ids 2 and 9 belong to other shards.
  expect_close(F::embedding(dev(ids), dev(table), 3, true), F::embedding(ids, table, 3, true), 0, "masked gather");
  EXPECT_THROW(F::embedding(dev(ids), dev(table), 3, false), InvalidArgument);
  Tensor dy = random_host({2, 3, 4}, DType::f32, 22);
  Tensor g = Tensor::zeros({6, 4}, DType::f32), dg = dev(g);
  F::embedding_backward(dy, ids, g, 3);
  F::embedding_backward(dev(dy), dev(ids), dg, 3);
  expect_close(dg, g, 1e-6, "scatter-add");  // id 3 twice: atomics reorder, values agree to rounding
}

TEST_F(CudaLayers, Conv2dWithPaddingStrideAndDilationMatchesHost) {
  F::Conv2dOptions o;
  o.stride_h = 2;
  o.padding_h = 1;
  o.padding_w = 1;
  o.dilation_w = 2;
  Tensor x = random_host({2, 3, 7, 8}, DType::f32, 23), w = random_host({4, 3, 3, 2}, DType::f32, 24);
  Tensor b = random_host({4}, DType::f32, 25);
  Tensor y = F::conv2d(x, w, b, o);
  expect_close(F::conv2d(dev(x), dev(w), dev(b), o), y, 1e-5, "conv2d");
  Tensor dy = random_host(y.shape(), DType::f32, 26);
  Tensor gw = Tensor::zeros(w.shape(), DType::f32), gb = Tensor::zeros({4}, DType::f32);
  Tensor dgw = dev(gw), dgb = dev(gb);
  Tensor dx = F::conv2d_backward(dy, x, w, gw, gb, o);
  expect_close(F::conv2d_backward(dev(dy), dev(x), dev(w), dgw, dgb, o), dx, 1e-5, "conv2d dx");
  expect_close(dgw, gw, 1e-5, "conv2d dW");
  expect_close(dgb, gb, 1e-5, "conv2d db");
}

TEST_F(CudaLayers, AttentionCoreForwardBackwardMatchesHost) {
  for (bool causal : {false, true}) {
    Tensor q = random_host({2, 5, 8}, DType::f32, 27), k = random_host({2, 5, 8}, DType::f32, 28);
    Tensor v = random_host({2, 5, 8}, DType::f32, 29), dout = random_host({2, 5, 8}, DType::f32, 30);
    Tensor p, dp;
    Tensor out = F::attention_core(q, k, v, 2, causal, p);
    expect_close(F::attention_core(dev(q), dev(k), dev(v), 2, causal, dp), out, 1e-5, "attention");
    expect_close(dp, p, 1e-5, "probs");
    auto host = F::attention_core_backward(dout, q, k, v, p, 2);
    auto device = F::attention_core_backward(dev(dout), dev(q), dev(k), dev(v), dp, 2);
    expect_close(device.q, host.q, 1e-5, "dq");
    expect_close(device.k, host.k, 1e-5, "dk");
    expect_close(device.v, host.v, 1e-5, "dv");
  }
}

TEST_F(CudaLayers, InitialisationIsBitIdenticalToTheHost) {
  const Shape global = {8, 6};
  const Shape offset = {2, 1};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (const InitSpec& spec : {InitSpec::uniform(-0.5, 2.0), InitSpec::xavier_uniform(), InitSpec::kaiming_uniform(),
                                 InitSpec::constant(0.125), InitSpec::normal(0.0, 0.02),
                                 InitSpec::trunc_normal(0.0, 1.0, -2.0, 2.0)}) {
      Tensor host = Tensor::empty({4, 3}, dtype);
      Tensor device = Tensor::empty({4, 3}, dtype, device_);
      initialize(host, global, offset, spec, 99, "blocks.0.w");
      initialize(device, global, offset, spec, 99, "blocks.0.w");
      EXPECT_TRUE(bit_identical(device, host)) << init_type_name(spec.type) << " " << dtype_name(dtype);
    }
}

TEST_F(CudaLayers, NcclCollectivesMatchTheMpiResults) {
  Communicator comm(MPI_COMM_WORLD);
  const int size = comm.size(), rank = comm.rank();
  Tensor x = random_host({7}, DType::f32, 31 + static_cast<unsigned>(rank));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    Tensor h = x.clone(), d = dev(x);
    comm.all_reduce(h, op);
    comm.all_reduce(d, op);
    expect_close(d, h, 1e-6, std::string("all_reduce ") + std::string(reduce_op_name(op)));
  }
  Tensor gathered_h = Tensor::empty({size * 7}, DType::f32), gathered_d = Tensor::empty({size * 7}, DType::f32, device_);
  comm.all_gather(x, gathered_h);
  CommRequest req = comm.all_gather_async(dev(x), gathered_d);
  req.wait();
  expect_close(gathered_d, gathered_h, 0, "all_gather");
  Tensor big = random_host({size * 3}, DType::f64, 40 + static_cast<unsigned>(rank));
  Tensor rs_h = Tensor::empty({3}, DType::f64), rs_d = Tensor::empty({3}, DType::f64, device_);
  comm.reduce_scatter(big, rs_h);
  comm.reduce_scatter(dev(big), rs_d);
  expect_close(rs_d, rs_h, 1e-14, "reduce_scatter");
  Tensor bh = x.clone(), bd = dev(x);
  comm.broadcast(bh, size - 1);
  comm.broadcast(bd, size - 1);
  expect_close(bd, bh, 0, "broadcast");
  if (size > 1 && one_device_per_rank()) {
    EXPECT_GT(comm.stats().nccl_calls, 0);
  } else {
    EXPECT_EQ(comm.stats().nccl_calls, 0) << "ranks sharing a GPU go through MPI staging";
  }
}

TEST_F(CudaLayers, VocabParallelCrossEntropyMatchesHost) {
  Communicator tp(MPI_COMM_WORLD);
  Tensor logits = random_host({6, 5}, DType::f32, 50 + static_cast<unsigned>(tp.rank()), 3.0);
  const std::int64_t v = 5 * tp.size();
  Tensor targets = Tensor::from_vector<std::int64_t>({0, v - 1, -100, 3 % v, 7 % v, 1}, {6});
  auto host = tp::vocab_parallel_cross_entropy(logits, targets, tp, -100);
  auto device = tp::vocab_parallel_cross_entropy(dev(logits), dev(targets), tp, -100);
  EXPECT_NEAR(device.loss, host.loss, 1e-12 * std::max(1.0, std::abs(host.loss)));
  EXPECT_EQ(device.counted, host.counted);
  expect_close(device.grad_logits, host.grad_logits, 1e-6, "grad_logits");
}

TEST_F(CudaLayers, TensorParallelLinearsOnDeviceMatchTheHostLayers) {
  Communicator tp(MPI_COMM_WORLD);
  tp::ParallelLinearOptions host_options, device_options;
  device_options.device = device_;
  tp::ColumnParallelLinear col_h(6, 8, tp, /*gather_output=*/false, host_options);
  tp::RowParallelLinear row_h(8, 6, tp, /*input_is_parallel=*/true, host_options);
  tp::ColumnParallelLinear col_d(6, 8, tp, false, device_options);
  tp::RowParallelLinear row_d(8, 6, tp, true, device_options);
  nn::initialize_parameters(col_h, 5, "mlp.up");
  nn::initialize_parameters(row_h, 5, "mlp.down");
  nn::initialize_parameters(col_d, 5, "mlp.up");
  nn::initialize_parameters(row_d, 5, "mlp.down");
  Tensor x = random_host({3, 6}, DType::f32, 60), dy = random_host({3, 6}, DType::f32, 61);
  Tensor hidden_h = col_h.forward(x);
  Tensor hidden_d = col_d.forward(dev(x));
  Tensor yh = row_h.forward(F::gelu(hidden_h));
  Tensor yd = row_d.forward(F::gelu(hidden_d));
  expect_close(yd, yh, 1e-5, "tp mlp forward");
  Tensor dxh = col_h.backward(F::gelu_backward(row_h.backward(dy), hidden_h));
  Tensor dxd = col_d.backward(F::gelu_backward(row_d.backward(dev(dy)), hidden_d));
  expect_close(dxd, dxh, 1e-5, "tp mlp dx");
  expect_close(row_d.weight.grad, row_h.weight.grad, 1e-5, "tp row dW");
  expect_close(col_d.weight.grad, col_h.weight.grad, 1e-5, "tp column dW");
  expect_close(col_d.bias.grad, col_h.bias.grad, 1e-5, "tp column db");
  expect_close(col_d.weight.value, col_h.weight.value, 0, "column weights (same init)");
}

}  // namespace
