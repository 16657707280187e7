// The device twins of a current decoder's attention (tests/models/test_decoder_gqa_serial.cpp):
// the CUDA rotary-embedding kernel forward and inverse, the grouped-query attention core
// (K and V GEMMs on the key/value head's block, dK and dV accumulated over the group)
// and a GQA + RoPE MultiHeadAttention forward and backward, each against the host backend.
//
// Every test needs a GPU. Without one each test is skipped with the runtime's reason,
// and the executable exits 77 (CTest: skipped).

#include <gtest/gtest.h>

#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/nn/attention.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;
namespace F = tessera::nn::functional;

class CudaRopeGqa : public DeviceTest {};

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-12; }

}  // namespace

TEST_F(CudaRopeGqa, RopeForwardAndInverseMatchHost) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = random_host({3, 7, 24}, dtype, 41, 2.0);
    for (double theta : {10000.0, 5.0}) {
      expect_close(F::rope(x.to(device_), 6, theta), F::rope(x, 6, theta), tolerance(dtype), "rope");
      expect_close(F::rope_backward(x.to(device_), 6, theta), F::rope_backward(x, 6, theta), tolerance(dtype),
                   "rope_backward");
    }
  }
}

TEST_F(CudaRopeGqa, GroupedQueryCoreMatchesHost) {
  const std::int64_t B = 2, S = 6, heads = 6, hd = 4;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (std::int64_t kv : {1, 2, 3, 6}) {
      for (bool causal : {true, false}) {
        const Tensor q = random_host({B, S, heads * hd}, dtype, 51, 2.0);
        const Tensor k = random_host({B, S, kv * hd}, dtype, 52, 2.0);
        const Tensor v = random_host({B, S, kv * hd}, dtype, 53);
        const Tensor g = random_host({B, S, heads * hd}, dtype, 54);
        Tensor probs_h, probs_d;
        const Tensor out_h = F::attention_core(q, k, v, heads, causal, probs_h);
        const Tensor out_d = F::attention_core(q.to(device_), k.to(device_), v.to(device_), heads, causal, probs_d);
        const std::string what = "kv " + std::to_string(kv);
        expect_close(out_d, out_h, tolerance(dtype), what + " context");
        expect_close(probs_d, probs_h, tolerance(dtype), what + " probs");
        const auto gh = F::attention_core_backward(g, q, k, v, probs_h, heads);
        const auto gd = F::attention_core_backward(g.to(device_), q.to(device_), k.to(device_), v.to(device_),
                                                   probs_d, heads);
        expect_close(gd.q, gh.q, tolerance(dtype), what + " dq");
        expect_close(gd.k, gh.k, tolerance(dtype), what + " dk");
        expect_close(gd.v, gh.v, tolerance(dtype), what + " dv");
      }
    }
  }
}

TEST_F(CudaRopeGqa, GqaRopeAttentionModuleMatchesHost) {
  nn::AttentionOptions o;
  o.n_kv_heads = 2;
  o.rope = true;
  o.rope_theta = 100.0;
  nn::MultiHeadAttention host(16, 4, o), device(16, 4, o, DType::f32, device_);
  auto hp = host.named_parameters(), dp = device.named_parameters();
  for (std::size_t i = 0; i < hp.size(); ++i) {
    hp[i].second->value.copy_from(random_host(hp[i].second->value.shape(), DType::f32, 60 + static_cast<unsigned>(i)));
    dp[i].second->value.copy_from(hp[i].second->value.to(device_));
  }
  const Tensor x = random_host({2, 5, 16}, DType::f32, 71);
  const Tensor dy = random_host({2, 5, 16}, DType::f32, 72);
  expect_close(device.forward(x.to(device_)), host.forward(x), 1e-5, "forward");
  expect_close(device.backward(dy.to(device_)), host.backward(dy), 1e-5, "dx");
  for (std::size_t i = 0; i < hp.size(); ++i) {
    expect_close(dp[i].second->grad, hp[i].second->grad, 1e-5, "grad of " + hp[i].first);
  }
}
