// FieldEmulator and load_model: the architecture's YAML round trip, and a checkpoint
// written at one layout rebuilt by load_model at another giving the same forward output.

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_test.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/init.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/ops.hpp"
#include "tessera/train/training_step.hpp"

namespace {

using namespace tessera;

models::FieldEmulatorConfig small_config() {
  models::FieldEmulatorConfig c;
  c.channels = 2;
  c.width = 6;
  c.mlp_hidden = 8;
  c.n_blocks = 2;
  c.kernel = 3;
  c.nlat = 9;  // uneven bands at 2 and 4 domain ranks
  c.nlon = 12;
  c.variables = {"h", "u"};
  c.mean = {9000.25, 0.1};
  c.std = {850.5, 1.0 / 3.0};  // not exact in decimal: the YAML must round-trip it bit for bit
  c.dt_seconds = 21600;
  return c;
}

// A smooth global field, the same on every rank, and this rank's band of it.
Tensor local_input(const models::FieldEmulator& model, std::int64_t batch) {
  const auto& c = model.config();
  const auto box = model.decomposition().box();
  Tensor x = Tensor::empty({batch, c.channels, box.lat.length, box.lon.length}, DType::f32);
  float* p = x.data<float>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t ch = 0; ch < c.channels; ++ch)
      for (std::int64_t i = 0; i < box.lat.length; ++i)
        for (std::int64_t j = 0; j < box.lon.length; ++j) {
          const double lat = static_cast<double>(box.lat.start + i), lon = static_cast<double>(box.lon.start + j);
          *p++ = static_cast<float>(std::sin(0.7 * lat + 0.3 * b) * std::cos(0.5 * lon + ch) + 0.1 * ch);
        }
  return x;
}

std::string scratch_dir() {
  long long pid = tessera::testing::world_rank() == 0 ? static_cast<long long>(getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() / ("tessera_field_emulator_" + std::to_string(pid))).string();
}

TEST(FieldEmulatorConfig, YamlRoundTripIsExact) {
  const auto c = small_config();
  const auto back = models::FieldEmulatorConfig::from_yaml(c.to_yaml());
  EXPECT_EQ(back, c);
  const auto from_metadata = models::model_config_from_metadata(models::model_metadata(c, "run:\n  seed: 3\n"), "m");
  EXPECT_EQ(from_metadata, c);
}

// parameter_count() (tessera-run refuses a model that cannot fit before building it) is
// the built model's count at every layout's full size; an uncountable size is a
// ConfigError, not a wrapped number.
TEST(FieldEmulatorConfig, ParameterCountIsTheBuiltModels) {
  const models::FieldEmulatorConfig c = small_config();
  Mesh mesh(MPI_COMM_SELF, ParallelismConfig{});
  models::FieldEmulator model(c, mesh);
  std::int64_t built = 0;
  for (const auto& [name, p] : model.named_parameters()) built += p->value.numel();
  EXPECT_EQ(c.parameter_count(), built);
  models::FieldEmulatorConfig huge = c;
  huge.n_blocks = std::int64_t{1} << 40;
  huge.width = std::int64_t{1} << 30;
  EXPECT_THROW((void)huge.parameter_count(), ConfigError);
}

TEST(FieldEmulatorConfig, UnknownKeyAndBadValuesAreNamed) {
  try {
    models::FieldEmulatorConfig::from_yaml("type: field_emulator\nwidht: 4\n", "meta");
    FAIL() << "an unknown key was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.widht"), std::string::npos) << e.what();
  }
  auto c = small_config();
  c.std = {1.0, 0.0};
  EXPECT_THROW(c.validate(), ConfigError);
  EXPECT_THROW(models::model_config_from_metadata("nothing: here\n", "meta"), ConfigError);
}

TEST(FieldEmulator, LoadModelAtAnotherLayoutGivesTheSameForward) {
  const int world = tessera::testing::world_size();
  // Written at tp 2 x domain W/2 (tp 1 on one rank), read back at tp 1 x domain W.
  const ParallelismConfig written{DataParallelMode::none, world >= 2 ? 2 : 1, world >= 2 ? world / 2 : 1};
  const ParallelismConfig read{DataParallelMode::none, 1, world};
  const std::string dir = scratch_dir();
  Tensor expected;
  {
    Mesh mesh(MPI_COMM_WORLD, written);
    models::FieldEmulator model(small_config(), mesh);
    nn::initialize_parameters(model, 11);
    expected = model.decomposition().gather(model.forward(local_input(model, 2)));
    io::SaveOptions options;
    options.step = 5;
    options.metadata = models::model_metadata(model.config());
    io::save_checkpoint(dir, mesh, model, nullptr, options);
  }
  Mesh mesh(MPI_COMM_WORLD, read);
  auto model = load_model(dir, mesh);
  EXPECT_EQ(model->config(), small_config());
  const Tensor got = model->decomposition().gather(model->forward(local_input(*model, 2)));
  if (tessera::testing::world_rank() == 0) {
    ASSERT_EQ(got.shape(), expected.shape());
    const auto a = got.to_vector<float>(), b = expected.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-5 * (1.0 + std::fabs(b[i]))) << "element " << i;
    }
  }
  // predict() is forward() between normalisation and its inverse.
  Tensor physical = local_input(*model, 1);
  Tensor normalised = physical.clone();
  model->normalize(normalised);
  Tensor via_forward = model->forward(normalised).contiguous();
  model->denormalize(via_forward);
  const auto p = model->predict(physical).to_vector<float>(), q = via_forward.to_vector<float>();
  for (std::size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], q[i], 1e-3 * (1.0 + std::fabs(q[i])));
  MPI_Barrier(MPI_COMM_WORLD);
  if (tessera::testing::world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST(FieldEmulator, LoadModelOfAMissingCheckpointFailsOnEveryRank) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, tessera::testing::world_size()});
  EXPECT_THROW(load_model("/nonexistent/tessera/checkpoint", mesh), Error);
}

}  // namespace

namespace {

// Steps of `model` on a fixed batch until finish() throws (at most `steps`); the message
// of the InvalidArgument, the same on every rank, or "" when none threw.
std::string train_until_refused(train::TrainingStep& step, models::FieldEmulator& model, int steps) {
  const Tensor x = local_input(model, 2);
  Tensor y = x.clone();
  ops::scale(y, 0.5);
  std::string message;
  for (int s = 1; s <= steps && message.empty(); ++s) {
    try {
      step.begin();
      step.before_backward(0);
      const double loss = train::field_emulator_forward_backward(model, x, y);
      if (!std::isfinite(loss)) step.note_non_finite_loss(s, "");
      step.finish(s, /*measure_norm=*/true);
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
  }
  const auto all = tessera::testing::all_gather_strings(message);
  for (const auto& m : all) EXPECT_EQ(m, all[0]);
  return message;
}

}  // namespace

// Issue 46: NaN weights (a blown-up checkpoint, a bad initialisation) made the loss NaN
// and were reported as "training diverged ... lower optimizer.lr". A parameter that is
// NaN before the first step is named, on every rank, from the rank that holds it; a
// genuine divergence (lr 1e30) keeps the lr advice.
TEST(TrainingStep, ANonFiniteLossIsBlamedOnItsCause) {
  const int world = tessera::testing::world_size();
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, world});
  {
    models::FieldEmulator model(small_config(), mesh);
    nn::initialize_parameters(model, 3);
    const auto params = model.named_parameters();
    const std::string name = params.front().first;
    if (tessera::testing::world_rank() == world - 1) params.front().second->value.data<float>()[1] = NAN;
    train::OptimizerConfig o;
    train::TrainingStep step(o, 10, mesh, model, nullptr);
    const std::string message = train_until_refused(step, model, 3);
    EXPECT_NE(message.find("training stopped at step 1: parameter '" + name +
                           "' holds NaN, already before the first step of this run (check the checkpoint or "
                           "initialisation it came from"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("(on rank " + std::to_string(world - 1) + " of " + std::to_string(world) + ")"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("optimizer.lr"), std::string::npos) << message;
  }
  {
    models::FieldEmulator model(small_config(), mesh);
    nn::initialize_parameters(model, 3);
    train::OptimizerConfig o;
    o.type = "sgd";
    o.lr = 1e30;
    o.clip_grad_norm = 0;
    train::TrainingStep step(o, 10, mesh, model, nullptr);
    const std::string message = train_until_refused(step, model, 6);
    EXPECT_EQ(message.rfind("training diverged at step ", 0), 0u) << message;
    EXPECT_NE(message.find("(lower optimizer.lr or set optimizer.clip_grad_norm)"), std::string::npos) << message;
    EXPECT_EQ(message.find("already before"), std::string::npos) << message;
  }
}
