// The CUDA twins of the optimizer and clipping compute entries (tests/optim's
// test_compute_host and tests/unit's test_host_compute check the host ones by hand):
// casts between f32/f64/bf16, sums of squares, the bf16 scale and halo_zero on device
// memory against the host backend on the same inputs; the Sgd and AdamW classes over
// several steps in each option combination; clip_grad_norm and global_grad_norm over a
// Mesh with sharded, replicated and bf16 gradients.
//
// Element-wise entries whose arithmetic is a single rounding (casts, the bf16 scale,
// zeroing) must match the host bit for bit; the optimizer updates run the host's double
// arithmetic per element and must match to the dtype's rounding; sums of squares add in
// a different order, so they match to double rounding.
//
// Runs at 1 and 2 ranks on ONE GPU (the clipping all-reduce then goes through the
// communicator's MPI staging). Without a GPU every test skips (exit 77: Skipped).

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/compute.hpp"
#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/clip.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;
using detail::compute_for;

class CudaOptim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    device_ = Device::cuda(world_rank() % cuda_device_count());
  }
  detail::Compute& host() { return compute_for(Device::host()); }
  detail::Compute& gpu() { return compute_for(device_); }
  Device device_;
};

constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::bf16};

// `t` (any float dtype, any device) as doubles, through the host cast (exact).
std::vector<double> as_doubles(const Tensor& t) {
  const Tensor h = t.to(Device::host()).contiguous();
  std::vector<double> out(static_cast<std::size_t>(h.numel()));
  compute_for(h, "as_doubles").cast(h.dtype(), h.data(), DType::f64, out.data(), h.numel(), 0);
  return out;
}

// Host tensor of `dtype` and `shape` (1-D when empty) holding `values` as the host cast
// stores them.
Tensor host_tensor(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
  Tensor t = Tensor::empty(shape, dtype);
  compute_for(t, "host_tensor").cast(DType::f64, values.data(), dtype, t.data(), t.numel(), 0);
  return t;
}

// Uniform values in [-scale, scale) from `seed`, stored in `dtype` on the host.
Tensor random_tensor(const Shape& shape, DType dtype, unsigned seed, double scale = 1.0) {
  return host_tensor(as_doubles(random_host(shape, DType::f64, seed, scale)), dtype, shape);
}

// The values every cast must carry bit for bit: bf16 ties in both directions, a value
// whose f32 rounding lands on a bf16 tie, infinities, the largest float, signed zeros,
// subnormals of each width, and a spread of ordinary values. (NaN is checked apart:
// the device and the host may set different NaN payloads.)
std::vector<double> cast_inputs() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, -(1.0 + 0x1p-8), 1.0 + 0x1p-8 + 0x1p-40,
                           1.0 + 0x1p-8 + 0x1p-20, inf, -inf, std::numeric_limits<float>::max(), 1e300, 0.0, -0.0,
                           0x1p-140, 0x1p-149, 1e-310, 0.1, -123.456};
  for (double x : as_doubles(random_host({1000}, DType::f64, 7, 1e4))) v.push_back(x);
  return v;
}

TEST_F(CudaOptim, CastsBetweenEveryPairOfFloatDtypesMatchTheHostBitForBit) {
  const std::vector<double> values = cast_inputs();
  const auto n = static_cast<std::int64_t>(values.size());
  for (DType from : kFloatTypes) {
    const Tensor src_h = host_tensor(values, from);
    const Tensor src_d = src_h.to(device_);
    for (DType to : kFloatTypes) {
      const std::string what = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      Tensor dst_h = Tensor::empty({n}, to), dst_d = Tensor::empty({n}, to, device_);
      host().cast(from, src_h.data(), to, dst_h.data(), n, 0);
      compute_for(src_d, "test").cast(from, src_d.data(), to, dst_d.data(), n, device_.index);
      EXPECT_TRUE(bit_identical(dst_d, dst_h)) << what;
    }
  }
}

TEST_F(CudaOptim, CastsRoundTripAndKeepNaN) {
  // f32 -> f64 -> f32 and bf16 -> f32/f64 -> bf16 are identities; f32 -> bf16 -> f32
  // gives the bf16 rounding of each value.
  const std::vector<double> values = cast_inputs();
  const auto n = static_cast<std::int64_t>(values.size());
  const Tensor f32 = host_tensor(values, DType::f32).to(device_);
  Tensor wide = Tensor::empty({n}, DType::f64, device_), back = Tensor::empty({n}, DType::f32, device_);
  gpu().cast(DType::f32, f32.data(), DType::f64, wide.data(), n, device_.index);
  gpu().cast(DType::f64, wide.data(), DType::f32, back.data(), n, device_.index);
  EXPECT_TRUE(bit_identical(back, f32));
  Tensor narrow = Tensor::empty({n}, DType::bf16, device_);
  gpu().cast(DType::f32, f32.data(), DType::bf16, narrow.data(), n, device_.index);
  gpu().cast(DType::bf16, narrow.data(), DType::f32, back.data(), n, device_.index);
  const std::vector<float> f = f32.to(Device::host()).to_vector<float>();
  const std::vector<float> r = back.to(Device::host()).to_vector<float>();
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(bfloat16::round_to_bits(f[i]), bfloat16::round_to_bits(r[i])) << "element " << i;
    EXPECT_EQ(r[i], bfloat16::to_float(bfloat16::round_to_bits(f[i]))) << "element " << i;
  }
  const std::vector<double> nan = {std::numeric_limits<double>::quiet_NaN(), -1.0};
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes) {
      const Tensor src = host_tensor(nan, from).to(device_);
      Tensor dst = Tensor::empty({2}, to, device_);
      gpu().cast(from, src.data(), to, dst.data(), 2, device_.index);
      const std::vector<double> out = as_doubles(dst);
      EXPECT_TRUE(std::isnan(out[0])) << dtype_name(from) << " -> " << dtype_name(to);
      EXPECT_EQ(out[1], -1.0);
    }
}

TEST_F(CudaOptim, SumOfSquaresMatchesTheHostInEveryDtypeAndIsDeterministic) {
  for (DType dtype : kFloatTypes)
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{1'000'003}}) {
      const Tensor h = random_tensor({n}, dtype, 11 + static_cast<unsigned>(n), 3.0);
      const Tensor d = h.to(device_);
      const double expected = host().sum_squares(dtype, h.data(), n, 0);
      const double first = gpu().sum_squares(dtype, d.data(), n, device_.index);
      const double second = gpu().sum_squares(dtype, d.data(), n, device_.index);
      // Both sums add the squares in f64, in different orders: the reordering bound for
      // n non-negative terms is (n - 1) u of the sum (u = 2^-53). 1e-13 held at n = 1000
      // but not at 10^6 (2.8e-13 on an H200, the first GPU run).
      const double order_bound = static_cast<double>(std::max<std::int64_t>(n - 1, 1)) * 0x1p-53 * expected;
      EXPECT_NEAR(first, expected, order_bound) << dtype_name(dtype) << " n = " << n;
      EXPECT_EQ(first, second) << dtype_name(dtype) << " n = " << n;
    }
  const Tensor inf = host_tensor({1.0, -std::numeric_limits<double>::infinity()}, DType::bf16).to(device_);
  EXPECT_EQ(gpu().sum_squares(DType::bf16, inf.data(), 2, device_.index), std::numeric_limits<double>::infinity());
}

TEST_F(CudaOptim, Bf16ScaleRoundsLikeTheHost) {
  for (double alpha : {0.25, 0.3, 1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-8 + 0x1p-20, -7.5}) {
    Tensor h = random_tensor({4099}, DType::bf16, 21, 100.0);
    Tensor d = h.to(device_);
    host().scale(DType::bf16, h.numel(), alpha, h.data(), 0);
    gpu().scale(DType::bf16, d.numel(), alpha, d.data(), device_.index);
    EXPECT_TRUE(bit_identical(d, h)) << "alpha = " << alpha;
  }
}

TEST_F(CudaOptim, HaloZeroClearsTheSameElementsAsTheHost) {
  // [2, 6 lat, 7 lon], a 3 x 4 rectangle walked forwards and backwards in latitude.
  detail::StridedLayout layout;
  layout.ndim = 3;
  const std::int64_t shape[] = {2, 6, 7}, strides[] = {42, 7, 1};
  for (int d = 0; d < 3; ++d) layout.shape[d] = shape[d], layout.strides[d] = strides[d];
  for (const detail::HaloRect rect : {detail::HaloRect{1, 2, 3, 4, 1}, detail::HaloRect{5, 0, 3, 4, -1}})
    for (DType dtype : kFloatTypes) {
      Tensor h = random_tensor({2, 6, 7}, dtype, 31);
      Tensor d = h.to(device_);
      host().halo_zero(dtype, h.data(), layout, rect, 0);
      gpu().halo_zero(dtype, d.data(), layout, rect, device_.index);
      EXPECT_TRUE(bit_identical(d, h)) << dtype_name(dtype) << " lat_step " << rect.lat_step;
    }
}

// ------------------------------------------------------------------------ Sgd and AdamW

// The same parameters (and, step by step, the same gradients) on the host and the device.
struct Twin {
  std::vector<Parameter> host, device;

  Twin(Device device, DType dtype) {
    const std::vector<Shape> shapes = {{5, 7}, {7}, {3, 2, 4}};
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Tensor v = random_tensor(shapes[k], dtype, 40 + static_cast<unsigned>(k));
      host.emplace_back(v.clone());
      this->device.emplace_back(v.to(device));
    }
  }
  static NamedParameters named(std::vector<Parameter>& ps) {
    NamedParameters out;
    for (std::size_t k = 0; k < ps.size(); ++k) out.emplace_back("p" + std::to_string(k), &ps[k]);
    return out;
  }
  // Fresh gradients for step `step`, identical on both sides.
  void set_grads(int step) {
    for (std::size_t k = 0; k < host.size(); ++k) {
      const Tensor g = random_tensor(host[k].value.shape(), host[k].value.dtype(),
                                     100 + 10 * static_cast<unsigned>(step) + static_cast<unsigned>(k), 0.5);
      host[k].grad.copy_from(g);
      device[k].grad.copy_from(g);
    }
  }
};

// Runs `steps` steps of `host_opt` and `device_opt` over `twin` and compares the values
// and the optimizer state to the dtype's rounding.
void expect_same_steps(Twin& twin, Optimizer& host_opt, Optimizer& device_opt, Device device, DType dtype,
                       const std::string& what) {
  const double tol = dtype == DType::f32 ? 1e-6 : 1e-14;
  for (int step = 0; step < 6; ++step) {
    twin.set_grads(step);
    host_opt.step();
    device_opt.step();
  }
  for (std::size_t k = 0; k < twin.host.size(); ++k) {
    expect_close(twin.device[k].value, twin.host[k].value, tol, what + " p" + std::to_string(k));
  }
  const auto state_d = device_opt.named_state(), state_h = host_opt.named_state();
  ASSERT_EQ(state_d.size(), state_h.size()) << what;
  for (std::size_t k = 0; k < state_d.size(); ++k) {
    EXPECT_TRUE(state_d[k].tensor.device() == device) << what << " " << state_d[k].name;
    expect_close(state_d[k].tensor, state_h[k].tensor, tol, what + " " + state_d[k].name);
  }
}

TEST_F(CudaOptim, SgdStepsEqualTheHostsInEveryOptionCombination) {
  const std::vector<std::pair<std::string, SgdOptions>> cases = {
      {"plain", {.lr = 0.1}},
      {"weight decay", {.lr = 0.05, .weight_decay = 0.01}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"momentum, dampening, weight decay", {.lr = 0.1, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.02}},
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
  };
  for (DType dtype : {DType::f32, DType::f64})
    for (const auto& [name, options] : cases) {
      Twin twin(device_, dtype);
      Sgd host_opt(Twin::named(twin.host), options), device_opt(Twin::named(twin.device), options);
      expect_same_steps(twin, host_opt, device_opt, device_, dtype,
                        "sgd " + name + " " + std::string(dtype_name(dtype)));
    }
}

TEST_F(CudaOptim, AdamWStepsEqualTheHostsWithAndWithoutWeightDecay) {
  const std::vector<std::pair<std::string, AdamWOptions>> cases = {
      {"defaults", {.lr = 1e-2}},
      {"decay, betas, eps", {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}},
  };
  for (DType dtype : {DType::f32, DType::f64})
    for (const auto& [name, options] : cases) {
      Twin twin(device_, dtype);
      AdamW host_opt(Twin::named(twin.host), options), device_opt(Twin::named(twin.device), options);
      expect_same_steps(twin, host_opt, device_opt, device_, dtype,
                        "adamw " + name + " " + std::string(dtype_name(dtype)));
    }
}

// ------------------------------------------------------------------------------ clipping

// One parameter of the clipping model: master shape, dtype and tp placement.
struct ClipDef {
  Shape global;
  DType dtype;
  MeshPlacement placement;
};

// Every rank's block of each parameter, on `device`, with a gradient drawn from the
// block's position (replicated blocks are equal on every rank, as after a sync).
std::vector<std::unique_ptr<Parameter>> clip_model(const std::vector<ClipDef>& defs, const Mesh& mesh,
                                                   Device device) {
  std::vector<std::unique_ptr<Parameter>> out;
  for (std::size_t k = 0; k < defs.size(); ++k) {
    const ClipDef& d = defs[k];
    Shape local = d.global, offset(d.global.size(), 0);
    if (d.placement.tp.is_shard()) {
      const int dim = d.placement.tp.dim;
      const ShardRange r = shard_range(d.global[dim], mesh.size(MeshDim::tp), mesh.rank(MeshDim::tp));
      local[dim] = r.length;
      offset[dim] = r.start;
    }
    const auto seed = 50 + static_cast<unsigned>(k) * 7 +
                      (d.placement.tp.is_shard() ? static_cast<unsigned>(mesh.rank(MeshDim::tp)) : 0u);
    auto p = std::make_unique<Parameter>(Tensor::zeros(local, d.dtype, device), d.global, d.placement, offset);
    p->grad.copy_from(random_tensor(local, d.dtype, seed, 2.0).to(device));
    out.push_back(std::move(p));
  }
  return out;
}

NamedParameters named(const std::vector<std::unique_ptr<Parameter>>& ps) {
  NamedParameters out;
  for (std::size_t k = 0; k < ps.size(); ++k) out.emplace_back("p" + std::to_string(k), ps[k].get());
  return out;
}

TEST_F(CudaOptim, ClipGradNormOverAMeshEqualsTheHostForShardedReplicatedAndBf16Gradients) {
  const ParallelismConfig config{DataParallelMode::none, world_size(), 1};  // tp over the world
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  MeshPlacement rows, cols;
  rows.tp = Placement::shard(0);
  cols.tp = Placement::shard(1);
  const std::vector<ClipDef> defs = {
      {{7, 3}, DType::f32, rows}, {{5}, DType::f64, {}}, {{4, 9}, DType::bf16, cols}, {{2, 3}, DType::bf16, {}}};
  for (const double fraction : {0.5, 2.0}) {  // clipping, then a max_norm above the norm
    auto host_params = clip_model(defs, mesh_h, Device::host());
    auto device_params = clip_model(defs, mesh_d, mesh_d.device());
    const double norm = global_grad_norm(named(host_params), mesh_h);
    EXPECT_NEAR(global_grad_norm(named(device_params), mesh_d), norm, 1e-13 * norm);
    const double norm_h = clip_grad_norm(named(host_params), fraction * norm, mesh_h);
    const double norm_d = clip_grad_norm(named(device_params), fraction * norm, mesh_d);
    EXPECT_EQ(norm_h, norm);
    EXPECT_NEAR(norm_d, norm_h, 1e-13 * norm_h);
    for (std::size_t k = 0; k < defs.size(); ++k) {
      const std::string what = "fraction " + std::to_string(fraction) + " p" + std::to_string(k);
      const Tensor& gd = device_params[k]->grad;
      const Tensor& gh = host_params[k]->grad;
      if (fraction >= 1.0) {
        EXPECT_TRUE(bit_identical(gd, gh)) << what << ": below max_norm nothing is scaled";
        continue;
      }
      // The coefficients differ by double rounding at most, so f32 and f64 agree to their
      // rounding and bf16 to one bf16 ulp (at most 2^-7 relative).
      const double rtol = gh.dtype() == DType::bf16 ? 0x1p-7 : (gh.dtype() == DType::f32 ? 1e-6 : 1e-14);
      const std::vector<double> d = as_doubles(gd), h = as_doubles(gh);
      for (std::size_t i = 0; i < h.size(); ++i) {
        EXPECT_NEAR(d[i], h[i], rtol * std::abs(h[i])) << what << " element " << i;
      }
    }
  }
}

TEST_F(CudaOptim, ClipGradNormWithoutAMeshClipsDeviceGradientsLocally) {
  std::vector<std::unique_ptr<Parameter>> host_params, device_params;
  for (DType dtype : kFloatTypes) {
    const Tensor g = random_tensor({6, 5}, dtype, 60 + static_cast<unsigned>(host_params.size()), 3.0);
    host_params.push_back(std::make_unique<Parameter>(Tensor::zeros({6, 5}, dtype)));
    host_params.back()->grad.copy_from(g);
    device_params.push_back(std::make_unique<Parameter>(Tensor::zeros({6, 5}, dtype, device_)));
    device_params.back()->grad.copy_from(g.to(device_));
  }
  const double norm_h = clip_grad_norm(named(host_params), 1.0);
  const double norm_d = clip_grad_norm(named(device_params), 1.0);
  EXPECT_NEAR(norm_d, norm_h, 1e-13 * norm_h);
  EXPECT_NEAR(global_grad_norm(named(device_params)), global_grad_norm(named(host_params)), 1e-6 * norm_h);
  EXPECT_NEAR(global_grad_norm(named(host_params)), 1.0, 1e-2);  // clipped to max_norm (bf16 rounding)
}

}  // namespace
