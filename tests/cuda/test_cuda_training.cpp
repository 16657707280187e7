// The CUDA twins of what the compute-backend change made device-resident: optimizers
// and clipping, the halo exchange (2-D grids, periodic, poles, adjoint), the
// domain-parallel convolution, the latitude-weighted loss, the field emulator's training
// steps, checkpoints written on one device and read on the other, ddp and fsdp2, and
// the tensor-parallel decoder. Each builds the host twin from the same seeds and data
// and compares: the host results are what the host suites verify against the serial
// models.
//
// Runs at 1 and 2 ranks on ONE GPU: the communicator sees two ranks on one device and
// sends their CUDA collectives through MPI with host staging (NCCL refuses that group).
// Without a GPU every test skips (exit 77: CTest reports Skipped, never Passed).

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/clip.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/init.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"
#include "tessera/tensor.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/parallelize.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;

Communicator& world() {
  static Communicator comm(MPI_COMM_WORLD);
  return comm;
}

// The suite's random data: seed first, f32 unless said.
Tensor random_host(const Shape& shape, std::uint64_t seed, double scale = 1.0, DType dtype = DType::f32) {
  return cuda_test::random_host(shape, dtype, static_cast<unsigned>(seed), scale);
}

class CudaTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    device_ = Device::cuda(world_rank() % cuda_device_count());
  }
  Device device_;
};

// Two parameter sets with the same values, one per device.
struct ParamPair {
  std::vector<Parameter> host, device;
  NamedParameters named(std::vector<Parameter>& ps) {
    NamedParameters out;
    for (std::size_t k = 0; k < ps.size(); ++k) out.emplace_back("p" + std::to_string(k), &ps[k]);
    return out;
  }
};

ParamPair make_params(Device device, DType dtype) {
  ParamPair pair;
  const std::vector<Shape> shapes = {{5, 7}, {7}, {3, 2, 4}};
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const Tensor v = random_host(shapes[k], 10 + k, 1.0, dtype);
    const Tensor g = random_host(shapes[k], 20 + k, 0.5, dtype);
    Parameter h(v.clone());
    h.grad = g.clone();
    Parameter d(v.to(device));
    d.grad = g.to(device);
    pair.host.push_back(std::move(h));
    pair.device.push_back(std::move(d));
  }
  return pair;
}

TEST_F(CudaTraining, SgdAndAdamWStepsOnTheDeviceEqualTheHostsToFp32Rounding) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const double tol = dtype == DType::f32 ? 1e-6 : 1e-14;
    ParamPair sgd = make_params(device_, dtype);
    Sgd sgd_h(sgd.named(sgd.host), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    Sgd sgd_d(sgd.named(sgd.device), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    ParamPair adam = make_params(device_, dtype);
    AdamW adam_h(adam.named(adam.host), {.lr = 1e-2, .weight_decay = 0.1});
    AdamW adam_d(adam.named(adam.device), {.lr = 1e-2, .weight_decay = 0.1});
    for (int step = 0; step < 5; ++step) {
      sgd_h.step();
      sgd_d.step();
      adam_h.step();
      adam_d.step();
    }
    for (std::size_t k = 0; k < sgd.host.size(); ++k) {
      expect_close(sgd.device[k].value, sgd.host[k].value, tol, "sgd p" + std::to_string(k));
      expect_close(adam.device[k].value, adam.host[k].value, tol, "adamw p" + std::to_string(k));
    }
    const auto state_d = adam_d.named_state(), state_h = adam_h.named_state();
    ASSERT_EQ(state_d.size(), state_h.size());
    for (std::size_t k = 0; k < state_d.size(); ++k) {
      EXPECT_TRUE(state_d[k].tensor.device() == device_) << state_d[k].name;
      expect_close(state_d[k].tensor, state_h[k].tensor, tol, state_d[k].name);
    }
  }
}

TEST_F(CudaTraining, ClipGradNormOnTheDeviceUsesOneAllReduceAndEqualsTheHost) {
  ParallelismConfig config;  // every rank a data-parallel replica (data none refuses 2 ranks)
  config.data = DataParallelMode::ddp;
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  ParamPair p = make_params(mesh_d.device(), DType::f32);
  const double norm_h = clip_grad_norm(p.named(p.host), 0.5, mesh_h);
  const double norm_d = clip_grad_norm(p.named(p.device), 0.5, mesh_d);
  EXPECT_NEAR(norm_d, norm_h, 1e-12 * norm_h);
  for (std::size_t k = 0; k < p.host.size(); ++k) {
    expect_close(p.device[k].grad, p.host[k].grad, 1e-6, "clipped grad " + std::to_string(k));
  }
}

// Halo exchanges of the same fields on both devices: pure copies are bit-identical, the
// adjoint's additions happen in the same order on both.
void check_halo(Device device, domain::ProcessGrid grid, domain::HaloSpec spec, const std::string& what) {
  const Shape global{2, 9, 12};
  domain::Decomposition d(world(), global, grid);
  domain::HaloExchange exchange(d, spec);
  const Shape padded = exchange.padded_shape({2});
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor h = random_host(padded, 300 + static_cast<unsigned>(d.rank()), 1.0, dtype);
    Tensor dv = h.to(device);
    exchange.exchange({h});
    exchange.exchange({dv});
    EXPECT_TRUE(bit_identical(dv, h)) << what << " forward";
    Tensor ha = random_host(padded, 400 + static_cast<unsigned>(d.rank()), 1.0, dtype);
    Tensor da = ha.to(device);
    exchange.exchange_adjoint({ha});
    exchange.exchange_adjoint({da});
    expect_close(da, ha, dtype == DType::f32 ? 1e-6 : 1e-15, what + " adjoint");
  }
}

TEST_F(CudaTraining, HaloExchangeOfDeviceFieldsEqualsTheHostExchange) {
  const int size = world_size();
  domain::HaloSpec periodic{{1, 1, 2, 2}, true, domain::PolePolicy::zero};
  domain::HaloSpec poles{{2, 1, 1, 1}, true, domain::PolePolicy::across_pole};
  domain::HaloSpec bounded{{1, 2, 1, 0}, false, domain::PolePolicy::replicate};
  check_halo(device_, {size, 1}, periodic, "latitude bands, periodic");
  check_halo(device_, {size, 1}, poles, "latitude bands, across the pole");
  check_halo(device_, {1, size}, bounded, "longitude bands, bounded");
  if (size == 4) check_halo(device_, {2, 2}, poles, "2x2 grid");
  // Staged through pinned host memory and straight from device memory: the same result.
  setenv("TESSERA_MPI_CUDA_AWARE", "0", 1);
  check_halo(device_, {size, 1}, poles, "staged");
  unsetenv("TESSERA_MPI_CUDA_AWARE");
}

TEST_F(CudaTraining, DomainConvAndTheLatitudeWeightedLossOnTheDeviceEqualTheHost) {
  const std::int64_t B = 2, C = 3, H = 11, W = 12;
  domain::Decomposition d(world(), {B, C, H, W});
  domain::DomainConv2dOptions oh{1, 1, domain::LonPadding::periodic, domain::PolePolicy::across_pole, true};
  domain::DomainConv2dOptions od = oh;
  od.device = device_;
  domain::DomainConv2d conv_h(d, C, 4, 3, 3, oh), conv_d(d, C, 4, 3, 3, od);
  nn::initialize_parameters(conv_h, 5);
  nn::initialize_parameters(conv_d, 5);
  EXPECT_TRUE(bit_identical(conv_d.weight.value, conv_h.weight.value)) << "same init on both devices";
  const auto box = d.box();
  const Tensor x = random_host({B, C, box.lat.length, box.lon.length}, 70 + static_cast<unsigned>(d.rank()));
  const Tensor t = random_host({B, 4, box.lat.length, box.lon.length}, 80 + static_cast<unsigned>(d.rank()));
  const Tensor yh = conv_h.forward(x), yd = conv_d.forward(x.to(device_));
  expect_close(yd, yh, 1e-5, "domain conv forward");
  const auto lh = domain::lat_weighted_mse(yh, t, d), ld = domain::lat_weighted_mse(yd, t.to(device_), d);
  EXPECT_NEAR(ld.value, lh.value, 1e-6 * std::max(1.0, lh.value));
  expect_close(ld.grad, lh.grad, 1e-6, "loss gradient");
  const Tensor dxh = conv_h.backward(lh.grad), dxd = conv_d.backward(ld.grad);
  domain::sync_domain_gradients(conv_h, world());
  domain::sync_domain_gradients(conv_d, world());
  expect_close(dxd, dxh, 1e-5, "domain conv dx");
  expect_close(conv_d.weight.grad, conv_h.weight.grad, 1e-5, "domain conv dW");
  expect_close(conv_d.bias.grad, conv_h.bias.grad, 1e-5, "domain conv db");
}

models::FieldEmulatorConfig emulator_config() {
  models::FieldEmulatorConfig c;
  c.channels = 2;
  c.width = 8;
  c.mlp_hidden = 8;
  c.n_blocks = 1;
  c.nlat = 10;
  c.nlon = 16;
  c.mean = {0.5, -0.5};
  c.std = {2.0, 1.0};
  return c;
}

// A few AdamW steps of the field emulator on a device mesh and a host mesh of the same
// layout (domain-parallel over every rank), returning the loss curves.
TEST_F(CudaTraining, FieldEmulatorTrainingOnTheDeviceTracksTheHostLossCurve) {
  ParallelismConfig config;
  config.data = DataParallelMode::none;
  config.domain = world_size();
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  models::FieldEmulator model_h(emulator_config(), mesh_h), model_d(emulator_config(), mesh_d);
  nn::initialize_parameters(model_h, 3);
  nn::initialize_parameters(model_d, 3);
  AdamW opt_h(model_h.named_parameters(), {.lr = 1e-2}), opt_d(model_d.named_parameters(), {.lr = 1e-2});
  const auto box = model_h.decomposition().box();
  for (int step = 0; step < 5; ++step) {
    const Tensor x = random_host({2, 2, box.lat.length, box.lon.length}, 500 + 10 * step + mesh_h.global_rank());
    const Tensor y = random_host({2, 2, box.lat.length, box.lon.length}, 600 + 10 * step + mesh_h.global_rank());
    opt_h.zero_grad();
    opt_d.zero_grad();
    const auto lh = domain::lat_weighted_mse(model_h.forward(x), y, model_h.decomposition());
    const auto ld = domain::lat_weighted_mse(model_d.forward(x.to(mesh_d.device())), y.to(mesh_d.device()),
                                             model_d.decomposition());
    EXPECT_NEAR(ld.value, lh.value, 1e-4 * lh.value) << "step " << step;
    model_h.backward(lh.grad);
    model_d.backward(ld.grad);
    domain::sync_domain_gradients(model_h, mesh_h);
    domain::sync_domain_gradients(model_d, mesh_d);
    opt_h.step();
    opt_d.step();
  }
  const auto ph = model_h.named_parameters(), pd = model_d.named_parameters();
  for (std::size_t k = 0; k < ph.size(); ++k) expect_close(pd[k].second->value, ph[k].second->value, 1e-4, ph[k].first);
}

TEST_F(CudaTraining, CheckpointsMoveBitExactlyBetweenDeviceAndHostModels) {
  ParallelismConfig config;
  config.data = DataParallelMode::none;
  config.domain = world_size();
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  const std::string root = (std::filesystem::temp_directory_path() / "tessera_cuda_ckpt").string();
  if (world_rank() == 0) std::filesystem::remove_all(root);
  world().barrier();
  for (io::CheckpointLayout layout : {io::CheckpointLayout::shared, io::CheckpointLayout::per_rank}) {
    models::FieldEmulator written(emulator_config(), mesh_d), read_h(emulator_config(), mesh_h),
        read_d(emulator_config(), mesh_d);
    nn::initialize_parameters(written, 11);
    AdamW opt(written.named_parameters(), {.lr = 1e-3});
    for (auto& [name, p] : written.named_parameters()) p->grad.copy_from(p->value);
    opt.step();  // optimizer state worth saving
    io::SaveOptions so;
    so.layout = layout;
    so.step = layout == io::CheckpointLayout::shared ? 1 : 2;
    const std::string dir = io::save_checkpoint(root, mesh_d, written, &opt, so);
    AdamW opt_h(read_h.named_parameters(), {.lr = 1e-3}), opt_d(read_d.named_parameters(), {.lr = 1e-3});
    io::load_checkpoint(dir, mesh_h, read_h, &opt_h);  // device-written, host-read
    io::load_checkpoint(dir, mesh_d, read_d, &opt_d);  // device-written, device-read
    const auto w = written.named_parameters(), h = read_h.named_parameters(), d = read_d.named_parameters();
    for (std::size_t k = 0; k < w.size(); ++k) {
      EXPECT_TRUE(bit_identical(h[k].second->value, w[k].second->value)) << w[k].first;
      EXPECT_TRUE(bit_identical(d[k].second->value, w[k].second->value)) << w[k].first;
      EXPECT_TRUE(d[k].second->value.device() == mesh_d.device());
    }
    const auto sw = opt.named_state(), sh = opt_h.named_state();
    for (std::size_t k = 0; k < sw.size(); ++k) EXPECT_TRUE(bit_identical(sh[k].tensor, sw[k].tensor)) << sw[k].name;
    // Host-written, device-read.
    so.step += 10;
    const std::string host_dir = io::save_checkpoint(root, mesh_h, read_h, &opt_h, so);
    models::FieldEmulator again(emulator_config(), mesh_d);
    io::load_checkpoint(host_dir, mesh_d, again);
    const auto a = again.named_parameters();
    for (std::size_t k = 0; k < w.size(); ++k) EXPECT_TRUE(bit_identical(a[k].second->value, w[k].second->value));
  }
  world().barrier();
  if (world_rank() == 0) std::filesystem::remove_all(root);
}

models::DecoderConfig tiny_decoder(std::int64_t heads, std::int64_t layers) {
  models::DecoderConfig arch;
  arch.vocab = 16;
  arch.d_model = 8;
  arch.n_heads = heads;
  arch.hidden = 16;
  arch.n_layers = layers;
  return arch;
}

TEST_F(CudaTraining, DdpAndFsdp2StepsOnTheDeviceEqualTheHost) {
  if (world_size() < 2) GTEST_SKIP() << "needs two data-parallel replicas";
  for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    ParallelismConfig config;
    config.data = mode;
    Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
    const models::DecoderConfig arch = tiny_decoder(2, 1);
    models::Decoder model_h(arch), model_d(arch, DType::f32, mesh_d.device());
    nn::initialize_parameters(model_h, 9);
    nn::initialize_parameters(model_d, 9);
    dp::DataParallel dp_h(model_h, mesh_h, mode), dp_d(model_d, mesh_d, mode);
    AdamW opt_h(model_h.named_parameters(), {.lr = 1e-2}), opt_d(model_d.named_parameters(), {.lr = 1e-2});
    Communicator self(MPI_COMM_SELF);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::int64_t> ids, targets;
      for (int i = 0; i < 8; ++i) {
        ids.push_back((5 * i + 3 * step + world_rank()) % 16);
        targets.push_back((7 * i + step) % 16);
      }
      const Tensor id = Tensor::from_vector(ids, {2, 4}), tg = Tensor::from_vector(targets, {8});
      opt_h.zero_grad();
      opt_d.zero_grad();
      const Tensor logits_h = model_h.forward(id), logits_d = model_d.forward(id.to(mesh_d.device()));
      const auto ce_h = tp::vocab_parallel_cross_entropy(logits_h.reshape({8, 16}), tg, self);
      const auto ce_d = tp::vocab_parallel_cross_entropy(logits_d.reshape({8, 16}), tg.to(mesh_d.device()), self);
      EXPECT_NEAR(ce_d.loss, ce_h.loss, 1e-5 * ce_h.loss);
      model_h.backward(ce_h.grad_logits.reshape(logits_h.shape()));
      model_d.backward(ce_d.grad_logits.reshape(logits_d.shape()));
      dp_h.finish_gradient_sync();
      dp_d.finish_gradient_sync();
      opt_h.step();
      opt_d.step();
    }
    const auto ph = model_h.named_parameters(), pd = model_d.named_parameters();
    for (std::size_t k = 0; k < ph.size(); ++k) {
      expect_close(pd[k].second->value, ph[k].second->value, 1e-4,
                   std::string(data_parallel_mode_name(mode)) + " " + ph[k].first);
    }
  }
}

TEST_F(CudaTraining, TensorParallelDecoderOnTheDeviceTracksTheHost) {
  ParallelismConfig config;
  config.data = DataParallelMode::none;
  config.tensor = world_size();
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  const models::DecoderConfig arch = tiny_decoder(4, 2);
  for (bool sp : {false, true}) {
    models::Decoder model_h(arch), model_d(arch, DType::f32, mesh_d.device());
    nn::initialize_parameters(model_h, 4);
    nn::initialize_parameters(model_d, 4);
    const auto plan = models::decoder_tp_plan(arch, sp);
    tp::parallelize(model_h, mesh_h.tp(), plan.plan);
    tp::parallelize(model_d, mesh_d.tp(), plan.plan);
    AdamW opt_h(model_h.named_parameters(), {.lr = 1e-2}), opt_d(model_d.named_parameters(), {.lr = 1e-2});
    std::vector<std::int64_t> ids, targets;
    for (int i = 0; i < 8; ++i) {
      ids.push_back((7 * i + 3) % 16);
      targets.push_back((3 * i + 1) % 16);
    }
    const Tensor id = Tensor::from_vector(ids, {2, 4}), tg = Tensor::from_vector(targets, {8});
    Communicator& loss_group = plan.vocab_sharded_logits ? mesh_h.tp() : world();
    Communicator& loss_group_d = plan.vocab_sharded_logits ? mesh_d.tp() : world();
    for (int step = 0; step < 3; ++step) {
      opt_h.zero_grad();
      opt_d.zero_grad();
      const Tensor lh = model_h.forward(id), ld = model_d.forward(id.to(mesh_d.device()));
      const Shape s = lh.shape();
      Communicator self(MPI_COMM_SELF);
      const auto ce_h = tp::vocab_parallel_cross_entropy(lh.reshape({8, s[2]}), tg,
                                                         plan.vocab_sharded_logits ? loss_group : self);
      const auto ce_d = tp::vocab_parallel_cross_entropy(ld.reshape({8, s[2]}), tg.to(mesh_d.device()),
                                                         plan.vocab_sharded_logits ? loss_group_d : self);
      EXPECT_NEAR(ce_d.loss, ce_h.loss, 1e-5 * ce_h.loss) << "sp " << sp << " step " << step;
      model_h.backward(ce_h.grad_logits.reshape(s));
      model_d.backward(ce_d.grad_logits.reshape(s));
      tp::sync_replicated_gradients(model_h, mesh_h.tp());
      tp::sync_replicated_gradients(model_d, mesh_d.tp());
      opt_h.step();
      opt_d.step();
    }
    const auto ph = model_h.named_parameters(), pd = model_d.named_parameters();
    for (std::size_t k = 0; k < ph.size(); ++k) expect_close(pd[k].second->value, ph[k].second->value, 1e-4, ph[k].first);
  }
}

TEST_F(CudaTraining, TwoRanksOnOneGpuFallBackFromNcclToStagedMpi) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  if (cuda_device_count() >= world_size()) GTEST_SKIP() << "every rank has its own GPU here";
  Communicator comm(MPI_COMM_WORLD);
  Tensor x = random_host({6}, 90 + static_cast<unsigned>(comm.rank()));
  Tensor h = x.clone(), d = x.to(device_);
  comm.all_reduce(h, ReduceOp::sum);
  comm.all_reduce(d, ReduceOp::sum);
  expect_close(d, h, 1e-6, "all_reduce on a shared GPU");
  EXPECT_EQ(comm.stats().nccl_calls, 0) << "ranks sharing a GPU must not use NCCL";
}

}  // namespace
