// domain::Redistribution and models::CoupledModel against their serial twins.
//
// Redistribution: the code's decomposition (2x2 blocks at 4 ranks, longitude or latitude
// bands at 2 and 3, one box at 1) to a model on M = 1 and 2 ranks in latitude bands, on a
// rank list in reverse order, and with two replicas: every model cell equals the global
// field's, and a round trip (code -> model -> code) is bit-exact for several f32 and f64
// fields with different leading dims, blocking and split (start/finish). Errors (M > N,
// a duplicate in the rank list, M = 0, a rank outside the communicator, a model grid
// that does not hold the model ranks, ranks that disagree, a wrong field on one rank)
// throw the same error on every rank, naming the argument, without a hang.
//
// CoupledModel: the field emulator on M = 1 and 2 model ranks (and tensor 2) fed in the
// code's layout equals the serial model on the gathered field (bit for bit at M = 1);
// a model whose grid is not the code's, and a wrong input on one rank, fail everywhere.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "../support/emulator_config.hpp"
#include "domain_test_support.hpp"
#include "mpi_test.hpp"
#include "test_redistribution_fields.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/coupled_model.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"
#include "tessera/domain/loss.hpp"

using namespace tessera;
using namespace tessera::domain;
using namespace tessera::testing;  // world(), world_rank(), world_size(), the small emulator
using namespace tessera::testing::redistribution;

namespace {

// The code layouts tried at this rank count.
std::vector<ProcessGrid> code_grids() {
  const int p = world_size();
  if (p == 4) return {{2, 2}, {1, 4}};
  if (p == 2) return {{1, 2}, {2, 1}};
  return {{p, 1}};
}

}  // namespace

TEST(Redistribution, CountsOfModelRanksInLatitudeBandsRoundTripExactly) {
  for (const ProcessGrid& g : code_grids()) {
    Decomposition code(world(), {kLat, kLon}, g);
    for (int m : {1, 2}) {
      if (m > world_size()) continue;
      Redistribution plan(code, ModelRanks::count(m));
      EXPECT_EQ(plan.model_size(), m);
      EXPECT_EQ(plan.model_grid(), (ProcessGrid{m, 1}));
      // count(M): ranks floor(i N / M).
      for (int i = 0; i < m; ++i) EXPECT_EQ(plan.model_ranks()[i], i * world_size() / m);
      EXPECT_EQ(plan.is_model_rank(), plan.model_rank() >= 0);
      if (plan.is_model_rank()) {
        EXPECT_EQ(plan.model_comm().size(), m);
        EXPECT_EQ(plan.model_comm().rank(), plan.model_rank());
        EXPECT_EQ(plan.model_box().lat, shard_range(kLat, m, plan.model_rank()));
        EXPECT_EQ(plan.model_box().lon.length, kLon);
      } else {
        EXPECT_THROW((void)plan.model_comm(), InvalidArgument);
      }
      check_round_trip(plan, false);
      check_round_trip(plan, true);
      check_round_trip(plan, false);  // the validated field set, reused
    }
  }
}

TEST(Redistribution, RankListsModelGridsAndReplicas) {
  const int p = world_size();
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  {
    std::vector<int> reversed;
    for (int r = p - 1; r >= 0; r -= 2) reversed.push_back(r);  // every other rank, last first
    Redistribution plan(code, ModelRanks::list(reversed));
    EXPECT_EQ(plan.model_ranks(), reversed);
    check_round_trip(plan, false);
  }
  if (p >= 2) {
    // Two replicas of one box (a model with tensor degree 2): both get the whole field.
    Redistribution plan(code, ModelRanks::list({p - 1, 0}), ModelLayout{{0, 0}, 2});
    EXPECT_EQ(plan.model_grid(), (ProcessGrid{1, 1}));
    check_round_trip(plan, true);
    // A 1 x 2 model grid: longitude halves.
    Redistribution lon(code, ModelRanks::count(2), ModelLayout{{1, 2}, 1});
    if (lon.is_model_rank()) EXPECT_EQ(lon.model_box().lon, shard_range(kLon, 2, lon.model_rank()));
    check_round_trip(lon, false);
  }
}

TEST(Redistribution, ContiguousPartsGoInPlaceAndMeetPackedEnds) {
  // One field: at M = 1 every code rank's whole box goes to the model rank and back, a
  // contiguous part MPI reads and writes in place. The last rank passes its field as a
  // strided view (every other element of a wider array: longitude stride 2), which is
  // packed while its peer unpacks or receives as usual: the wire format is one. Several
  // fields always travel packed.
  constexpr std::int64_t lat = 7, lon = 20;
  const std::vector<std::vector<FieldSpec>> sets{{{DType::f64, {2}}},
                                                 {{DType::f64, {2}}, {DType::f32, {3}}, {DType::f64, {}}}};
  for (const ProcessGrid& g : code_grids()) {
    Decomposition code(world(), {lat, lon}, g);
    for (int m : {1, 2}) {
      if (m > world_size()) continue;
      for (const std::vector<FieldSpec>& fields : sets) {
        Redistribution plan(code, ModelRanks::count(m));
        std::vector<Tensor> code_fields, model_fields, back;
        Tensor wide;  // the strided view's storage
        const bool strided = world_rank() == world_size() - 1;
        for (std::size_t k = 0; k < fields.size(); ++k) {
          Tensor f = filled(static_cast<int>(k), fields[k].dtype, fields[k].leading, code.box());
          if (k == 0 && strided) {
            Shape s = f.shape();
            wide = Tensor::zeros({s[0], s[1], 2 * s[2]}, f.dtype());
            Tensor view = Tensor::view(wide.data(), s, f.dtype(), Device::host(), {s[1] * 2 * s[2], 2 * s[2], 2});
            view.copy_from(f);
            f = view;
          }
          code_fields.push_back(f);
          back.push_back(Tensor::zeros(f.shape(), fields[k].dtype));
          if (plan.is_model_rank()) {
            model_fields.push_back(Tensor::zeros(plan.model_shape(fields[k].leading), fields[k].dtype));
          }
        }
        plan.to_model(code_fields, model_fields);
        const RedistributionStats st = plan.stats();
        for (std::size_t k = 0; k < model_fields.size(); ++k) {
          const Tensor expected = filled(static_cast<int>(k), fields[k].dtype, fields[k].leading, plan.model_box());
          EXPECT_TRUE(same_bits(model_fields[k], expected)) << plan.str() << ", field " << k;
        }
        plan.to_code(model_fields, back);
        for (std::size_t k = 0; k < back.size(); ++k) {
          EXPECT_TRUE(same_bits(back[k], code_fields[k])) << plan.str() << ": round trip of field " << k;
        }
        EXPECT_EQ(st.direct_messages + st.packed_messages, st.to_model_sends + st.to_model_recvs);
        if (fields.size() > 1) EXPECT_EQ(st.direct_messages, 0) << plan.str();
        if (fields.size() == 1 && m == 1 && !plan.is_model_rank()) {
          // A code rank's one message, its whole box: in place unless strided.
          EXPECT_EQ(st.direct_messages, strided ? 0 : 1) << plan.str() << " on rank " << world_rank();
        }
      }
    }
  }
}

TEST(Redistribution, PerNodeDefaultIsOnePerGpuOrOnePerNode) {
  // One node here: its GPUs (at least one model rank) spread over the node's ranks.
  const int p = world_size();
  const std::vector<int> ranks = resolve_model_ranks(world(), ModelRanks::per_node());
  const int expected = std::clamp(cuda_device_count(), 1, p);
  ASSERT_EQ(static_cast<int>(ranks.size()), expected);
  for (int k = 0; k < expected; ++k) EXPECT_EQ(ranks[k], k * p / expected);
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  Redistribution plan(code, ModelRanks::per_node());
  check_round_trip(plan, false);
}

TEST(Redistribution, BadArgumentsFailOnEveryRankNamingTheArgument) {
  const int p = world_size();
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(p + 1)); }, "M > N");
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(0)); }, "model rank count M = 0");
  std::vector<int> too_many(static_cast<std::size_t>(p + 1));
  for (int i = 0; i <= p; ++i) too_many[static_cast<std::size_t>(i)] = i;
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::list(too_many)); }, "M > N");
  if (p >= 2) {
    expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::list({1, 1})); }, "twice");
  } else {
    expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::list({0, 0})); }, "M > N");
  }
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::list({p})); }, "outside");
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::list({})); }, "empty");
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(1), ModelLayout{{2, 1}, 1}); },
                                "model grid 2 (lat) x 1 (lon)");
  expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(1), ModelLayout{{0, 0}, 2}); },
                                "replicas");
  if (p >= 2) {
    // One rank alone chose another count, or another way of choosing.
    expect_error<InvalidArgument>(
        [&] { Redistribution plan(code, ModelRanks::count(world_rank() == p - 1 ? 2 : 1)); }, "different model ranks");
    expect_error<InvalidArgument>(
        [&] { Redistribution plan(code, world_rank() == 0 ? ModelRanks::per_node() : ModelRanks::count(1)); },
        "chose the model ranks differently");
    // A bad argument on one rank only.
    expect_error<InvalidArgument>([&] { Redistribution plan(code, ModelRanks::count(world_rank() == 1 ? p + 1 : 1)); },
                                  "M > N");
  }
  // Fields: a wrong box on the last rank only, model fields on a rank that is no model rank.
  Redistribution plan(code, ModelRanks::count(1));
  const Tensor model_field = plan.is_model_rank() ? Tensor::zeros(plan.model_shape({}), DType::f32) : Tensor{};
  const Tensor good = Tensor::zeros(code.local_shape({}), DType::f32);
  const Tensor bad = Tensor::zeros({code.box().lat.length + 1, code.box().lon.length}, DType::f32);
  const Tensor mine = world_rank() == p - 1 ? bad : good;
  expect_error<ShapeError>([&] { plan.to_model({mine}, plan.is_model_rank() ? std::vector<Tensor>{model_field}
                                                                             : std::vector<Tensor>{}); },
                           "code field 0");
  if (p >= 2) {
    const Tensor stray = Tensor::zeros({1}, DType::f32);
    expect_error<InvalidArgument>(
        [&] {
          plan.to_model({good}, plan.is_model_rank() ? std::vector<Tensor>{model_field} : std::vector<Tensor>{stray});
        },
        "not a model rank");
  }
  const Tensor wrong_dtype = plan.is_model_rank() ? Tensor::zeros(plan.model_shape({}), DType::f64) : Tensor{};
  expect_error<ShapeError>(
      [&] { plan.to_model({good}, plan.is_model_rank() ? std::vector<Tensor>{wrong_dtype} : std::vector<Tensor>{}); },
      "model field 0");
  // Still usable after the errors.
  check_round_trip(plan, false);
  EXPECT_THROW(plan.finish(), InvalidArgument);
}

// --- CoupledModel ---------------------------------------------------------------------

namespace {

// A checkpoint of an initialised emulator, written by rank 0 alone (its own mesh).
std::string emulator_checkpoint() {
  static const std::string root = [] {
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("tessera_test_redistribution_np" + std::to_string(world_size()) + "_" +
                              std::to_string(::getpid())))
                                .string();
    std::string path = dir;  // rank 0's name (its pid) for every rank
    int length = static_cast<int>(path.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(length));
    MPI_Bcast(path.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (world_rank() == 0) {
      std::filesystem::remove_all(path);
      Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
      models::FieldEmulator model(small_emulator_config(kLat, kLon), self);
      nn::initialize_parameters(model, 17);
      save_emulator(path, self, model, /*step=*/3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }();
  return root;
}

// The serial model (every rank its own) on the global field: the reference.
// (Not static: a Mesh that outlived MPI_Finalize could not free its communicators.)
Tensor serial_prediction(const Tensor& global, bool physical) {
  Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
  std::unique_ptr<models::FieldEmulator> model = load_model(emulator_checkpoint(), self);
  return physical ? model->predict(global) : model->forward(global);
}

Tensor box_of(const Tensor& global, const LocalBox& b) {
  const int d = global.dim();
  return global.narrow(d - 2, b.lat.start, b.lat.length).narrow(d - 1, b.lon.start, b.lon.length).contiguous();
}

Tensor global_input(std::int64_t batch) {
  Tensor x = Tensor::empty({batch, 2, kLat, kLon}, DType::f32);
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 3.0);
  return x;
}

}  // namespace

TEST(CoupledModel, EqualsTheSerialModelOnTheGatheredField) {
  const int p = world_size();
  const Tensor global = global_input(2);
  const Tensor expected_predict = serial_prediction(global, true);
  const Tensor expected_forward = serial_prediction(global, false);
  struct Case {
    int m, tensor;
  };
  std::vector<Case> cases{{1, 1}};
  if (p >= 2) {
    cases.push_back({2, 1});
    cases.push_back({2, 2});
  }
  for (const ProcessGrid& g : code_grids()) {
    Decomposition code(world(), {kLat, kLon}, g);
    const Tensor x = box_of(global, code.box());
    for (const Case& c : cases) {
      models::CoupledModel model(emulator_checkpoint(), code, ModelRanks::count(c.m), {c.tensor, true});
      EXPECT_EQ(model.runs_model(), model.plan().is_model_rank());
      EXPECT_EQ(model.config(), small_emulator_config(kLat, kLon));
      const Tensor y = model.predict(x);
      const Tensor f = model.forward(x);
      const Tensor want = box_of(expected_predict, code.box());
      const Tensor want_f = box_of(expected_forward, code.box());
      const std::string where = "code grid " + g.str() + ", M = " + std::to_string(c.m) + ", tensor " +
                                std::to_string(c.tensor);
      if (c.m == 1) {
        // One model rank: the serial model on the gathered field, bit for bit.
        EXPECT_TRUE(same_bits(y, want)) << where;
        EXPECT_TRUE(same_bits(f, want_f)) << where;
      } else {
        // Bands (and tensor parallelism) change the GEMMs' shapes, so the serial model
        // agrees to rounding...
        ASSERT_EQ(y.shape(), want.shape());
        const std::vector<float> a = y.to_vector<float>(), b = want.to_vector<float>();
        for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * (1.0 + std::fabs(b[i]))) << where;
        // ...and the model run directly on its ranks' bands agrees bit for bit: the
        // coupling adds nothing but copies.
        Tensor all = Tensor::empty(global.shape(), DType::f32);
        const Tensor gathered = code.gather(y, 0);
        if (code.rank() == 0) all.copy_from(gathered);
        MPI_Bcast(all.data(), static_cast<int>(all.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
        if (model.runs_model()) {
          const LocalBox band = model.plan().model_box();
          const Tensor direct = model.model().predict(box_of(global, band));
          EXPECT_TRUE(same_bits(direct, box_of(all, band))) << where << ", model rank " << model.plan().model_rank();
        }
      }
      // B = 1 as a 3-D field, and output over the input.
      Tensor one = box_of(global.narrow(0, 0, 1), code.box()).reshape({2, code.box().lat.length, code.box().lon.length});
      Tensor inout = one.clone();
      model.predict(inout, inout);
      const Tensor y1 = model.predict(one);
      EXPECT_TRUE(same_bits(inout, y1)) << where;
      EXPECT_TRUE(same_bits(y1, y.narrow(0, 0, 1).contiguous().reshape(y1.shape()))) << where;
    }
  }
}

TEST(CoupledModel, ErrorsFailEveryRank) {
  const int p = world_size();
  // The code's grid is not the model's (10 latitudes, the model has 9).
  Decomposition other(world(), {kLat + 1, kLon}, code_grids().front());
  expect_error<InvalidArgument>([&] { models::CoupledModel m(emulator_checkpoint(), other, ModelRanks::count(1)); },
                                "nlat x nlon");
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  expect_error<InvalidArgument>(
      [&] { models::CoupledModel m(emulator_checkpoint(), code, ModelRanks::count(p + 1)); }, "M > N");
  expect_error<Error>([&] { models::CoupledModel m(emulator_checkpoint() + "/missing", code, ModelRanks::count(1)); },
                      "missing");
  if (p >= 2) {
    expect_error<InvalidArgument>(
        [&] { models::CoupledModel m(emulator_checkpoint(), code, ModelRanks::list({0, 0})); }, "twice");
  }
  models::CoupledModel model(emulator_checkpoint(), code, ModelRanks::count(1));
  const Tensor good = box_of(global_input(1), code.box());
  const Tensor bad = Tensor::zeros({1, 3, code.box().lat.length, code.box().lon.length}, DType::f32);
  expect_error<ShapeError>([&] { (void)model.predict(world_rank() == p - 1 ? bad : good); }, "is not (B, 2");
  expect_error<InvalidArgument>([&] { (void)model.forward(Tensor::zeros(good.shape(), DType::f64)); }, "must be f32");
  if (p >= 2) {
    // Another batch size on one rank: the leading dims disagree.
    const Tensor two = box_of(global_input(2), code.box());
    expect_error<InvalidArgument>([&] { (void)model.predict(world_rank() == 0 ? two : good); }, "leading dims");
  }
  EXPECT_EQ(model.predict(good).shape(), good.shape());  // still usable
}

// --- CoupledModel::train_step -----------------------------------------------------------

namespace {

// The serial twin of K coupled steps: the checkpoint's model on this rank alone, trained
// on the global fields with the same loss and optimizer. Returns the losses; the model
// keeps the trained weights.
std::vector<double> serial_training(models::FieldEmulator& model, const std::vector<Tensor>& xs,
                                    const std::vector<Tensor>& ys, const models::CoupledTrainOptions& options) {
  NamedParameters params = model.named_parameters();
  std::unique_ptr<Optimizer> optimizer;
  if (options.optimizer == models::CoupledTrainOptions::Optimizer::adamw) {
    optimizer = std::make_unique<AdamW>(params, AdamWOptions{.lr = options.lr});
  } else {
    optimizer = std::make_unique<Sgd>(params, SgdOptions{.lr = options.lr});
  }
  std::vector<double> losses;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    optimizer->zero_grad();
    const Tensor prediction = model.forward(xs[k]);
    const LossResult loss = lat_weighted_mse(prediction, ys[k], model.decomposition(), model.config().latitude_grid);
    model.backward(loss.grad);
    optimizer->step();
    losses.push_back(loss.value);
  }
  return losses;
}

}  // namespace

TEST(CoupledModel, TrainStepEqualsSerialTrainingOnTheGatheredFields) {
  const int p = world_size();
  constexpr int kSteps = 3;
  std::vector<Tensor> xs, ys;  // global normalised fields, a different pair each step
  for (int k = 0; k < kSteps; ++k) {
    Tensor x = global_input(2), y = Tensor::empty(x.shape(), DType::f32);
    float* px = x.data<float>();
    float* py = y.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      px[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + k));
      py[i] = static_cast<float>(std::cos(0.23 * static_cast<double>(i) - k) * 0.5);
    }
    xs.push_back(x);
    ys.push_back(y);
  }
  struct Case {
    int m, tensor;
    models::CoupledTrainOptions options;
  };
  using Kind = models::CoupledTrainOptions::Optimizer;
  std::vector<Case> cases{{1, 1, {Kind::adamw, 1e-2}}, {1, 1, {Kind::sgd, 0.1}}};
  if (p >= 2) {
    cases.push_back({2, 1, {Kind::adamw, 1e-2}});
    cases.push_back({2, 2, {Kind::sgd, 0.1}});
  }
  for (const ProcessGrid& g : code_grids()) {
    Decomposition code(world(), {kLat, kLon}, g);
    for (const Case& c : cases) {
      const std::string where = "code grid " + g.str() + ", M = " + std::to_string(c.m) + ", tensor " +
                                std::to_string(c.tensor) + (c.options.optimizer == Kind::adamw ? ", adamw" : ", sgd");
      Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
      std::unique_ptr<models::FieldEmulator> serial = load_model(emulator_checkpoint(), self);
      const std::vector<double> expected = serial_training(*serial, xs, ys, c.options);

      models::CoupledModel model(emulator_checkpoint(), code, ModelRanks::count(c.m), {c.tensor, true});
      for (int k = 0; k < kSteps; ++k) {
        const double loss = model.train_step(box_of(xs[k], code.box()), box_of(ys[k], code.box()), c.options);
        // The same loss on every code rank, bit for bit...
        double low = loss, high = loss;
        MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        EXPECT_EQ(low, high) << where << ", step " << k;
        // ...and the serial run's (steps after the first see the updated weights).
        if (c.m == 1) {
          EXPECT_EQ(loss, expected[static_cast<std::size_t>(k)]) << where << ", step " << k;
        } else {
          EXPECT_NEAR(loss, expected[static_cast<std::size_t>(k)], 1e-6 * expected[static_cast<std::size_t>(k)])
              << where << ", step " << k;
        }
      }
      EXPECT_EQ(model.steps(), kSteps);
      if (!model.runs_model() || c.tensor != 1) continue;
      // The weights after K steps: the serial run's (every model rank holds them whole
      // without tensor parallelism).
      const NamedParameters trained = model.model().named_parameters(), twin = serial->named_parameters();
      ASSERT_EQ(trained.size(), twin.size());
      for (std::size_t i = 0; i < trained.size(); ++i) {
        const Tensor& a = trained[i].second->value;
        const Tensor& b = twin[i].second->value;
        ASSERT_EQ(a.shape(), b.shape()) << trained[i].first;
        if (c.m == 1) {
          EXPECT_TRUE(same_bits(a, b)) << where << ": " << trained[i].first;
        } else {
          const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
          for (std::size_t j = 0; j < va.size(); ++j) {
            ASSERT_NEAR(va[j], vb[j], 1e-5 * (1.0 + std::fabs(vb[j]))) << where << ": " << trained[i].first;
          }
        }
      }
    }
  }
}

TEST(CoupledModel, TrainStepErrorsFailEveryRank) {
  const int p = world_size();
  Decomposition code(world(), {kLat, kLon}, code_grids().front());
  models::CoupledModel model(emulator_checkpoint(), code, ModelRanks::count(1));
  const Tensor x = box_of(global_input(1), code.box());
  const Tensor wrong = Tensor::zeros({1, 2, code.box().lat.length, code.box().lon.length + 1}, DType::f32);
  expect_error<ShapeError>([&] { (void)model.train_step(x, world_rank() == p - 1 ? wrong : x); }, "target");
  expect_error<InvalidArgument>([&] { (void)model.train_step(x, x, {models::CoupledTrainOptions::Optimizer::sgd, -1}); },
                                "lr = ");
  EXPECT_EQ(model.steps(), 0);
  (void)model.train_step(x, x, {models::CoupledTrainOptions::Optimizer::sgd, 0.1});
  expect_error<InvalidArgument>([&] { (void)model.train_step(x, x); }, "the first step created sgd");
  EXPECT_EQ(model.steps(), 1);
}
