// Tied weights under ddp and fsdp2, against the serial model trained on the union of the
// dp batches (issue: fsdp2 rejected a parameter shared by two modules, and a tied head
// that reads the embedding table outside the embedding's forward could not be wrapped).
//
// TiedHeadNet: ids -> Embedding -> Linear -> logits through the embedding table (the
//   decoder's tied head: the root reads embed.weight and declares it through
//   Module::tied_parameter_paths()).
// SharedNet: two units that register one Parameter object (a weight shared by two
//   layers); nothing to declare, DataParallel sees it in both units.
// Both modes, overlap on and off, at every dp size the world allows: every parameter
// tracks the serial master after every SGD step, the tied parameter stays dp-Replicate
// (fsdp2 still shards the others), its bucket comes last, and overlap on and off are
// bit-identical.

#include <gtest/gtest.h>

#include <functional>

#include "dp_test_util.hpp"
#include "mpi_test.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr std::int64_t kVocab = 9, kDim = 6, kSeq = 3, kLocalBatch = 2;
constexpr int kSteps = 3;

// The parameter `name` of the module at `path` (wrapped or not: wrappers register the
// same Parameter objects under the same names).
Parameter& parameter_of(nn::Module& root, const std::string& path, const std::string& name) {
  for (auto& [n, p] : root.at(path).named_parameters()) {
    if (n == name) return *p;
  }
  throw InvalidArgument("no parameter " + path + "." + name);
}

class TiedHeadNet : public nn::Module {
 public:
  TiedHeadNet() {
    register_child("embed", std::make_unique<nn::Embedding>(kVocab, kDim));
    register_child("mid", std::make_unique<nn::Linear>(kDim, kDim, /*bias=*/true));
  }
  Tensor forward(const Tensor& ids) override {
    hidden_ = at("mid").forward(at("embed").forward(ids));
    return nn::functional::linear(hidden_, parameter_of(*this, "embed", "weight").value, Tensor());
  }
  Tensor backward(const Tensor& grad_logits) override {
    Parameter& table = parameter_of(*this, "embed", "weight");
    Tensor no_bias;
    Tensor g = nn::functional::linear_backward(grad_logits.contiguous(), hidden_, table.value, table.grad, no_bias);
    hidden_ = Tensor();
    return at("embed").backward(at("mid").backward(g));
  }
  std::string type_name() const override { return "TiedHeadNet"; }
  std::vector<std::string> tied_parameter_paths() const override { return {declared_}; }
  std::string declared_ = "embed.weight";

 private:
  Tensor hidden_;
};

// A layer computing x W^T with a weight it does not own.
class SharedLinear : public nn::Module {
 public:
  explicit SharedLinear(Parameter& weight) : weight_(weight) { register_parameter("weight", weight); }
  Tensor forward(const Tensor& x) override {
    x_ = x;
    return nn::functional::linear(x, weight_.value, Tensor());
  }
  Tensor backward(const Tensor& dy) override {
    Tensor no_bias;
    return nn::functional::linear_backward(dy.contiguous(), x_, weight_.value, weight_.grad, no_bias);
  }
  std::string type_name() const override { return "SharedLinear"; }

 private:
  Parameter& weight_;
  Tensor x_;
};

// ids -> embed -> a -> mid -> b -> logits; a and b share one [kDim, kDim] weight.
class SharedNet : public nn::Module {
 public:
  SharedNet() {
    shared_.value = Tensor::zeros(Shape{kDim, kDim}, DType::f32);
    shared_.global_shape = {kDim, kDim};
    shared_.local_offset = {0, 0};
    shared_.grad = Tensor::zeros(Shape{kDim, kDim}, DType::f32);
    shared_.init.type = InitType::normal;
    shared_.init.std = 0.3;
    register_child("embed", std::make_unique<nn::Embedding>(kVocab, kDim));
    register_child("a", std::make_unique<SharedLinear>(shared_));
    register_child("mid", std::make_unique<nn::Linear>(kDim, kDim, /*bias=*/true));
    register_child("b", std::make_unique<SharedLinear>(shared_));
  }
  Tensor forward(const Tensor& ids) override {
    return at("b").forward(at("mid").forward(at("a").forward(at("embed").forward(ids))));
  }
  Tensor backward(const Tensor& dy) override {
    return at("embed").backward(at("a").backward(at("mid").backward(at("b").backward(dy))));
  }
  std::string type_name() const override { return "SharedNet"; }

 private:
  Parameter shared_;  // a member, not registered here: the root stays parameter-free
};

// Sample i's token ids and regression target ([kSeq] ids, [kSeq, out] target).
Tensor ids_of(const std::vector<std::int64_t>& samples) {
  Tensor ids = Tensor::empty({static_cast<std::int64_t>(samples.size()), kSeq}, DType::i64);
  auto* p = static_cast<std::int64_t*>(ids.data());
  for (std::size_t b = 0; b < samples.size(); ++b) {
    for (std::int64_t s = 0; s < kSeq; ++s) p[b * kSeq + s] = (samples[b] * 5 + s * 3 + 1) % kVocab;
  }
  return ids;
}
Tensor targets_of(const std::vector<std::int64_t>& samples, std::int64_t out) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(samples.size()), kSeq, out}, DType::f32);
  for (std::size_t b = 0; b < samples.size(); ++b) {
    t.narrow(0, static_cast<std::int64_t>(b), 1).copy_from(random_tensor({1, kSeq, out}, 700 + samples[b]));
  }
  return t;
}
// dp rank r's samples at `step`.
std::vector<std::int64_t> samples_of(int r, int step) {
  std::vector<std::int64_t> s;
  for (std::int64_t k = 0; k < kLocalBatch; ++k) s.push_back(step * 16 + r * kLocalBatch + k);
  return s;
}

// Each Parameter once (an optimizer takes a shared one under its first name).
NamedParameters unique_parameters(nn::Module& model) {
  NamedParameters out;
  for (const auto& entry : model.named_parameters()) {
    Parameter* p = entry.second;  // a plain variable: clang 14 cannot capture a structured binding
    if (std::none_of(out.begin(), out.end(), [&](const auto& e) { return e.second == p; })) out.push_back(entry);
  }
  return out;
}

// The serial twin trained on the union of the P dp batches (the loss normalised over
// it): every parameter's value after each step. `prepare` runs after initialisation.
template <class Net>
std::vector<std::vector<Tensor>> serial_trajectory(int P, std::int64_t out, const std::function<void(nn::Module&)>& prepare) {
  Net serial;
  nn::initialize_parameters(serial, 31);
  prepare(serial);
  Sgd serial_opt(unique_parameters(serial), {.lr = 0.5});
  std::vector<std::vector<Tensor>> values(kSteps);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::int64_t> all;
    for (int r = 0; r < P; ++r) {
      for (std::int64_t s : samples_of(r, step)) all.push_back(s);
    }
    serial_opt.zero_grad();
    const Tensor y = serial.forward(ids_of(all));
    serial.backward(mse_grad(y, targets_of(all, out), static_cast<double>(all.size() * kSeq * out)));
    serial_opt.step();
    for (Parameter* p : serial.parameters()) values[step].push_back(p->value.clone());
  }
  return values;
}

template <class Net>
void expect_tied_training_tracks_serial(std::int64_t out, const std::string& tied_name) {
  const int P = world_size();
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  ASSERT_EQ(mesh.dp_size(), P);
  const int rank = mesh.coords().dp;

  const std::vector<std::vector<Tensor>> serial_values = serial_trajectory<Net>(P, out, [](nn::Module&) {});

  std::vector<std::vector<Tensor>> finals;
  for (const DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    for (const bool overlap : {true, false}) {
      const std::string what = std::string(data_parallel_mode_name(mode)) + (overlap ? " overlap" : " no overlap") +
                               " at dp " + std::to_string(P);
      Net model;
      nn::initialize_parameters(model, 31);
      dp::MemoryPlanLayout layout = dp::MemoryPlanLayout::of(mesh);
      layout.mode = mode;
      const dp::MemoryReport planned = dp::plan_memory(model, layout, dp::OptimizerKind::sgd);
      dp::DataParallel data_parallel(model, mesh, mode, {.bucket_bytes = 64, .overlap = overlap});
      Sgd opt(unique_parameters(model), {.lr = 0.5});
      {
        EXPECT_EQ(data_parallel.tied_parameters(), std::vector<std::string>{tied_name}) << what;
        const auto buckets = data_parallel.buckets();
        ASSERT_FALSE(buckets.empty()) << what;
        EXPECT_EQ(buckets.back(), std::vector<std::string>{tied_name}) << what << ": the tied bucket is the last";
        EXPECT_EQ(dp::measure_memory(unique_parameters(model), nullptr).parameter_bytes, planned.parameter_bytes)
            << what << ": the memory plan predicts what is kept whole";
      }
      for (auto& [name, p] : model.named_parameters()) {
        if (name == tied_name) EXPECT_TRUE(p->placement.dp.is_replicate()) << what << ": " << name;
        if (mode == DataParallelMode::fsdp2 && name == "mid.weight") {
          EXPECT_TRUE(p->placement.dp.is_shard()) << what << ": the untied parameters are still sharded";
        }
      }
      Net snapshot;
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<std::int64_t> mine = samples_of(rank, step);
        opt.zero_grad();
        const Tensor y = model.forward(ids_of(mine));
        model.backward(mse_grad(y, targets_of(mine, out), static_cast<double>(kLocalBatch * kSeq * out)));
        data_parallel.finish_gradient_sync();
        opt.step();
        auto sp = snapshot.parameters();
        for (std::size_t i = 0; i < sp.size(); ++i) sp[i]->value = serial_values[step][i];
        expect_tracks_serial(snapshot, model, what + " after step " + std::to_string(step));
      }
      finals.emplace_back();
      for (Parameter* p : model.parameters()) finals.back().push_back(p->value.clone());
    }
  }
  for (std::size_t k : {0u, 2u}) {
    for (std::size_t i = 0; i < finals[k].size(); ++i) {
      EXPECT_TRUE(bitwise_equal(finals[k][i], finals[k + 1][i])) << "overlap on/off, variant " << k << " parameter " << i;
    }
  }
}

}  // namespace

TEST(DataParallelTied, TiedHeadReadOutsideItsUnitTracksSerial) {
  expect_tied_training_tracks_serial<TiedHeadNet>(kVocab, "embed.weight");
}

TEST(DataParallelTied, ParameterSharedByTwoUnitsTracksSerial) {
  expect_tied_training_tracks_serial<SharedNet>(kDim, "a.weight");
}

TEST(DataParallelTied, DeclaringAMissingParameterIsNamed) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  TiedHeadNet model;
  model.declared_ = "embed.table";
  try {
    dp::DataParallel data_parallel(model, mesh, DataParallelMode::fsdp2);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the root module (TiedHeadNet) declares tied parameter 'embed.table'"),
              std::string::npos)
        << e.what();
  }
}

// Frozen parameters (a LoRA base weight): broadcast like the others, never reduced,
// bucketed or sharded; their gradient stays undefined; the trainable ones still track
// the serial twin, and the memory plan predicts the frozen one whole with no gradient.
TEST(DataParallelFrozen, FrozenParametersStayWholeAndUnreduced) {
  const int P = world_size();
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  auto freeze = [](nn::Module& m) {
    for (auto& [name, p] : m.named_parameters()) {
      if (name == "mid.weight") {
        p->trainable = false;
        p->grad = Tensor();
      }
    }
  };
  const std::vector<std::vector<Tensor>> serial_values = serial_trajectory<TiedHeadNet>(P, kVocab, freeze);
  for (const DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    for (const bool overlap : {true, false}) {
      const std::string what = std::string(data_parallel_mode_name(mode)) + (overlap ? " overlap" : " no overlap");
      TiedHeadNet model;
      nn::initialize_parameters(model, 31);
      freeze(model);
      if (mesh.coords().dp != 0) {
        for (Parameter* p : model.parameters()) ops::scale(p->value, 1.5);  // the broadcast undoes it
      }
      dp::MemoryPlanLayout layout = dp::MemoryPlanLayout::of(mesh);
      layout.mode = mode;
      const dp::MemoryReport planned = dp::plan_memory(model, layout, dp::OptimizerKind::sgd);
      dp::DataParallel data_parallel(model, mesh, mode, {.bucket_bytes = 64, .overlap = overlap});
      Sgd opt(unique_parameters(model), {.lr = 0.5});
      const dp::MemoryReport measured = dp::measure_memory(unique_parameters(model), nullptr);
      EXPECT_EQ(measured.parameter_bytes, planned.parameter_bytes) << what;
      EXPECT_EQ(measured.gradient_bytes, planned.gradient_bytes) << what;
      for (const auto& bucket : data_parallel.buckets()) {
        for (const std::string& n : bucket) EXPECT_NE(n, "mid.weight") << what;
      }
      const auto sharded = data_parallel.sharded_parameters();
      EXPECT_EQ(std::count(sharded.begin(), sharded.end(), "mid.weight"), 0) << what;
      if (mode == DataParallelMode::fsdp2) {
        EXPECT_EQ(std::count(sharded.begin(), sharded.end(), "mid.bias"), 1) << what << ": the trainable still shard";
      }
      Parameter& frozen = parameter_of(model, "mid", "weight");
      EXPECT_TRUE(frozen.placement.dp.is_replicate()) << what;
      TiedHeadNet snapshot;
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<std::int64_t> mine = samples_of(mesh.coords().dp, step);
        opt.zero_grad();
        const Tensor y = model.forward(ids_of(mine));
        model.backward(mse_grad(y, targets_of(mine, kVocab), static_cast<double>(kLocalBatch * kSeq * kVocab)));
        data_parallel.finish_gradient_sync();
        opt.step();
        EXPECT_FALSE(frozen.grad.defined()) << what;
        auto sp = snapshot.parameters();
        for (std::size_t i = 0; i < sp.size(); ++i) sp[i]->value = serial_values[step][i];
        expect_tracks_serial(snapshot, model, what + " after step " + std::to_string(step));
      }
    }
  }
}
