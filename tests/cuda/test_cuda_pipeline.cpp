// Pipeline stage messages of CUDA tensors. With every rank on its own GPU (and NCCL on)
// Communicator::prepare_point_to_point opens NCCL channels, one per peer and direction,
// and CUDA messages take them; with ranks sharing a GPU (the fallback) or TESSERA_NCCL=0
// they take MPI through host memory. Either way:
//   - messages both ways between two ranks, each receive posted before the send the
//     other rank waits for, arrive intact (on one shared channel they would deadlock);
//   - pipeline training on the device (pipeline 2, GPipe and 1F1B, stash and
//     recompute) equals the same pipeline on the host and the unpipelined training on
//     the host to fp32 rounding: the loss, every gradient and every weight of the stage
//     after each step;
// and the communicator's counters show which path the messages took.
// Without a GPU every test is skipped (CTest reports Skipped).

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../pp/pp_test_util.hpp"
#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"
#include "tessera/version.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;

// Whether CUDA messages between the ranks take NCCL: a build with NCCL, TESSERA_NCCL
// not 0, and each rank its own GPU (the ranks of this suite share one node).
bool expect_nccl() {
  const char* setting = std::getenv("TESSERA_NCCL");
  const bool enabled = setting == nullptr || std::strcmp(setting, "0") != 0;
  return TESSERA_HAVE_NCCL && enabled && world_size() > 1 && cuda_device_count() >= world_size();
}

// Stage neighbours of rank `rank` in a chain of `size`.
std::vector<int> neighbours(int rank, int size) {
  std::vector<int> out;
  if (rank > 0) out.push_back(rank - 1);
  if (rank + 1 < size) out.push_back(rank + 1);
  return out;
}

class CudaPipeline : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    if (world_size() < 2) GTEST_SKIP() << "stage messages need two ranks";
  }
};

TEST_F(CudaPipeline, MessagesBothWaysArriveIntactOnEitherPath) {
  Communicator comm(MPI_COMM_WORLD);
  comm.prepare_point_to_point(device_, neighbours(world_rank(), world_size()));
  comm.prepare_point_to_point(device_, neighbours(world_rank(), world_size()));  // kept, not reopened
  const std::int64_t nccl_before = comm.stats().nccl_calls;
  const int rank = world_rank(), size = world_size();
  // Every rank exchanges three messages of different sizes with each neighbour, posting
  // all its receives before its sends: each send is waited for by a receive the peer
  // posted before its own sends, which only channels of their own per direction allow.
  std::vector<Tensor> expected, received;
  std::vector<CommRequest> requests;
  for (int peer : neighbours(rank, size)) {
    for (int k = 0; k < 3; ++k) {
      const Shape shape{2 + k, 3};
      expected.push_back(random_host(shape, DType::f32, 100 * peer + 10 * rank + k));
      received.push_back(Tensor::zeros(shape, DType::f32, device_));
      requests.push_back(comm.irecv(received.back(), peer, k));
    }
  }
  std::vector<Tensor> sent;
  for (int peer : neighbours(rank, size)) {
    for (int k = 0; k < 3; ++k) {
      sent.push_back(random_host({2 + k, 3}, DType::f32, 100 * rank + 10 * peer + k).to(device_));
      requests.push_back(comm.isend(sent.back(), peer, k));
    }
  }
  // test() never blocks; wait() completes what test() left.
  for (CommRequest& r : requests) (void)r.test();
  for (CommRequest& r : requests) r.wait();
  for (std::size_t i = 0; i < received.size(); ++i) {
    EXPECT_TRUE(bit_identical(received[i], expected[i])) << "message " << i;
  }
  const auto messages = static_cast<std::int64_t>(received.size() + sent.size());
  EXPECT_EQ(comm.stats().nccl_calls - nccl_before, expect_nccl() ? messages : 0);
}

TEST_F(CudaPipeline, APeerListedOnOneSideOnlyIsRefusedOnEveryRank) {
  Communicator comm(MPI_COMM_WORLD);
  // Rank 0 lists rank 1; rank 1 lists nobody.
  const std::vector<int> peers = world_rank() == 0 ? std::vector<int>{1} : std::vector<int>{};
  EXPECT_THROW(comm.prepare_point_to_point(device_, peers), InvalidArgument);
  EXPECT_THROW(comm.prepare_point_to_point(device_, {world_rank()}), InvalidArgument);
}

// Linear 6 -> 8, GELU, Linear 8 -> 6, Linear 6 -> 3 on `device`.
std::unique_ptr<nn::Sequential> make_model(Device device) {
  auto model = std::make_unique<nn::Sequential>();
  model->append(std::make_unique<nn::Linear>(6, 8, true, DType::f32, device));
  model->append(std::make_unique<nn::GELU>());
  model->append(std::make_unique<nn::Linear>(8, 6, true, DType::f32, device));
  model->append(std::make_unique<nn::Linear>(6, 3, true, DType::f32, device));
  return model;
}

Parameter& parameter_named(nn::Module& model, const std::string& name) {
  for (const auto& [n, p] : model.named_parameters()) {
    if (n == name) return *p;
  }
  throw InvalidArgument("no parameter " + name);
}

void train_and_compare(pp::Schedule schedule, int microbatches, pp::StageActivations activations) {
  constexpr std::uint64_t kSeed = 77;
  constexpr std::int64_t kBatch = 8;
  const std::string what = std::string(pp::schedule_name(schedule)) + ", m " + std::to_string(microbatches) + ", " +
                           std::string(pp::stage_activations_name(activations));
  SCOPED_TRACE(what);
  ParallelismConfig config{DataParallelMode::none, 1, 1, world_size()};
  Mesh mesh_h(MPI_COMM_WORLD, config), mesh_d(MPI_COMM_WORLD, config, Device::cuda());
  const Device device = mesh_d.device();
  mesh_d.pp().prepare_point_to_point(device, neighbours(mesh_d.coords().pp, mesh_d.pp_size()));

  auto serial = make_model(Device::host());
  auto model_h = make_model(Device::host());
  auto model_d = make_model(device);
  pp::PipelineOptions options;
  options.schedule = schedule;
  options.microbatches = microbatches;
  options.activations = activations;
  pp::Pipeline pipe_h(*model_h, mesh_h, options), pipe_d(*model_d, mesh_d, options);
  for (nn::Module* m : {static_cast<nn::Module*>(serial.get()), static_cast<nn::Module*>(model_h.get()),
                        static_cast<nn::Module*>(model_d.get())}) {
    nn::initialize_parameters(*m, kSeed);
  }
  const SgdOptions sgd{.lr = 0.05, .momentum = 0.9};
  Sgd opt_s(serial->named_parameters(), sgd), opt_h(model_h->named_parameters(), sgd),
      opt_d(model_d->named_parameters(), sgd);

  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = tessera::testing::random_tensor({kBatch, 6}, 300 + static_cast<std::uint64_t>(step));
    const Tensor t = tessera::testing::random_tensor({kBatch, 3}, 400 + static_cast<std::uint64_t>(step));
    opt_s.zero_grad();
    opt_h.zero_grad();
    opt_d.zero_grad();
    Tensor dy;
    const double serial_loss = tessera::testing::mse_share(serial->forward(x), t, {0, 0, kBatch, kBatch}, dy);
    serial->backward(dy);
    auto loss_fn = [&](const Tensor& out, const pp::Microbatch& mb, Tensor& grad) {
      const double share = tessera::testing::mse_share(out, t, mb, grad);
      grad = grad.to(out.device());
      return share;
    };
    const double loss_h = pipe_h.train_step(pipe_h.is_first() ? x : Tensor(), loss_fn);
    const CommStats before = mesh_d.pp().stats();
    const double loss_d = pipe_d.train_step(pipe_d.is_first() ? x.to(device) : Tensor(), loss_fn);
    const CommStats& after = mesh_d.pp().stats();
    EXPECT_NEAR(loss_d, loss_h, 1e-5 * loss_h);
    EXPECT_NEAR(loss_d, serial_loss, 1e-5 * serial_loss);

    // Per microbatch a stage of two sends or receives one activation and one gradient
    // and an MPI header; the loss broadcast is one MPI call.
    const std::int64_t m = microbatches;
    if (expect_nccl()) {
      EXPECT_EQ(after.nccl_calls - before.nccl_calls, 2 * m);
      EXPECT_EQ(after.mpi_calls - before.mpi_calls, m + 1);
    } else {
      EXPECT_EQ(after.nccl_calls - before.nccl_calls, 0) << "ranks sharing a GPU send stage messages through MPI";
      EXPECT_EQ(after.mpi_calls - before.mpi_calls, 3 * m + 1);
    }

    for (const auto& [name, p] : model_d->named_parameters()) {
      expect_close(p->grad, parameter_named(*model_h, name).grad, 1e-5, what + ": grad of " + name + " (host pipeline)");
      expect_close(p->grad, parameter_named(*serial, name).grad, 1e-5, what + ": grad of " + name + " (serial)");
    }
    opt_s.step();
    opt_h.step();
    opt_d.step();
    for (const auto& [name, p] : model_d->named_parameters()) {
      expect_close(p->value, parameter_named(*model_h, name).value, 1e-5, what + ": " + name + " (host pipeline)");
      expect_close(p->value, parameter_named(*serial, name).value, 1e-5, what + ": " + name + " (serial)");
    }
  }
}

TEST_F(CudaPipeline, TrainingEqualsTheHostPipelineAndTheSerialTraining) {
  for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
    for (int m : {1, 3}) train_and_compare(schedule, m, pp::StageActivations::stash);
  }
  train_and_compare(pp::Schedule::one_f_one_b, 4, pp::StageActivations::recompute);
}

}  // namespace
