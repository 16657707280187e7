// Domain parallelism inside a pipeline stage: a Sequential (domain-parallel 3x3 conv ->
// channel MLP -> 1x1 conv head) split at "1", the convolution's stage decomposed over
// latitude. Each rank sends its own latitude rows to the rank of the next stage with
// the same domain coordinate. Three AdamW steps, 1F1B and GPipe, 2 microbatches: the
// loss (summed over the domain group), every gradient and every master weight equal
// the serial twin's within relative 1e-5.
//
// At 1 rank: pipeline 1; at 2 ranks: pipeline 2; at 4 ranks: pipeline 2 x domain 2.

#include <gtest/gtest.h>

#include "mpi_test.hpp"
#include "pp_test_util.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/models/channel_mlp.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr std::int64_t kInC = 2, kC = 4, kHid = 6, kOutC = 3, kLat = 6, kLon = 8, kRows = 4;

std::unique_ptr<nn::Sequential> make_field_model(const domain::Decomposition* decomposition) {
  auto root = std::make_unique<nn::Sequential>();
  if (decomposition == nullptr) {
    nn::Conv2dOptions o;
    o.padding_h = 1;
    o.padding_w = 1;
    root->append(std::make_unique<nn::Conv2d>(kInC, kC, 3, 3, o));
  } else {
    domain::DomainConv2dOptions o;
    o.lon_padding = domain::LonPadding::zero;
    o.pole = domain::PolePolicy::zero;
    root->append(std::make_unique<domain::DomainConv2d>(*decomposition, kInC, kC, 3, 3, o));
  }
  root->append(std::make_unique<models::ChannelMlpBlock>(kC, kHid));
  root->append(std::make_unique<nn::Conv2d>(kC, kOutC, 1, 1));
  return root;
}

Tensor local_rows(const Tensor& field, const domain::Decomposition& d) {
  const auto box = d.box();
  return field.narrow(2, box.lat.start, box.lat.length).narrow(3, box.lon.start, box.lon.length).contiguous();
}

// 0.5 * sum((y - t)^2) / n over this rank's rows, n the whole batch's element count.
double field_mse(const Tensor& y, const Tensor& t, const pp::Microbatch& mb, Tensor& grad) {
  return mse_share(y, t, mb, grad, kOutC * kLat * kLon);
}

TEST(PipelineDomain, MatchesSerialTraining) {
  ParallelismConfig config{DataParallelMode::none, 1, world_size() == 4 ? 2 : 1, world_size() == 1 ? 1 : 2};
  for (auto schedule : {pp::Schedule::one_f_one_b, pp::Schedule::gpipe}) {
    SCOPED_TRACE(std::string(pp::schedule_name(schedule)));
    Mesh mesh(MPI_COMM_WORLD, config);
    domain::Decomposition decomposition(mesh, Shape{kLat, kLon});
    auto serial = make_field_model(nullptr);
    nn::initialize_parameters(*serial, 77);
    AdamW serial_opt(serial->named_parameters(), {.lr = 1e-2});
    auto model = make_field_model(&decomposition);
    pp::PipelineOptions options;
    options.schedule = schedule;
    options.microbatches = 2;
    if (mesh.pp_size() > 1) options.cut_points = {"1"};
    pp::Pipeline pipeline(*model, mesh, options);
    nn::initialize_parameters(*model, 77);
    AdamW optimizer(model->named_parameters(), {.lr = 1e-2});

    for (int step = 0; step < 3; ++step) {
      const Tensor x = random_tensor({kRows, kInC, kLat, kLon}, 31 + static_cast<std::uint64_t>(step));
      const Tensor t = random_tensor({kRows, kOutC, kLat, kLon}, 61 + static_cast<std::uint64_t>(step));
      serial_opt.zero_grad();
      Tensor dy;
      const double serial_loss = field_mse(serial->forward(x), t, {0, 0, kRows, kRows}, dy);
      serial->backward(dy);

      optimizer.zero_grad();
      const Tensor local_t = local_rows(t, decomposition);
      double loss = pipeline.train_step(pipeline.is_first() ? local_rows(x, decomposition) : Tensor(),
                                        [&](const Tensor& y, const pp::Microbatch& mb, Tensor& grad) {
                                          return field_mse(y, local_t, mb, grad);
                                        });
      domain::sync_domain_gradients(*model, mesh);
      Tensor total = Tensor::from_vector<double>({loss}, {1});
      mesh.domain().all_reduce(total);
      EXPECT_NEAR(total.to_vector<double>()[0], serial_loss, 1e-5 * serial_loss);
      expect_stage_matches(*serial, *model, true, "gradients, step " + std::to_string(step));
      serial_opt.step();
      optimizer.step();
      expect_stage_matches(*serial, *model, false, "weights, step " + std::to_string(step));
    }
  }
}

}  // namespace
