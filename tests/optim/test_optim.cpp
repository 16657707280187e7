// Optimizers: SGD (plain, momentum with dampening and weight decay, Nesterov) and
// AdamW, three steps against reference values computed independently from PyTorch's
// update rules (50-digit mpmath, 17 significant digits here; step 1 of each is easy to
// check by hand); state shaped and placed like its parameter; state restored through
// named_state(); option and parameter errors that name the culprit.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/optim.hpp"
#include "expect_error.hpp"

using namespace tessera;
using tessera::testing::expect_error;

namespace {

using Values = std::vector<double>;

const Values kStart = {0.5, -1.0, 2.0, 0.0};
// The gradient of each of the three steps.
const std::vector<Values> kGrads = {{0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.2, 0.2, -0.1, -0.3}};

Parameter make_param(DType dtype) {
  Tensor v = Tensor::empty({2, 2}, dtype);
  if (dtype == DType::f64) {
    v.copy_from(Tensor::from_vector<double>(kStart, {2, 2}));
  } else {
    v.copy_from(Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.0f}, {2, 2}));
  }
  return Parameter(v);
}

void set_grad(Parameter& p, const Values& g) {
  if (p.grad.dtype() == DType::f64) {
    p.grad.copy_from(Tensor::from_vector<double>(g, {2, 2}));
  } else {
    p.grad.copy_from(Tensor::from_vector<float>({float(g[0]), float(g[1]), float(g[2]), float(g[3])}, {2, 2}));
  }
}

Values values_of(const Tensor& t) {
  if (t.dtype() == DType::f64) return t.to_vector<double>();
  Values out;
  for (float x : t.to_vector<float>()) out.push_back(x);
  return out;
}

void expect_near(const Values& got, const Values& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::abs(want[i]))) << what << " element " << i;
  }
}

// Runs three steps and checks the parameter (and the first state tensor, if given)
// after each, in f64 (tight) and f32 (fp32 rounding).
template <class Opt, class Options>
void check_three_steps(const Options& options, const std::vector<Values>& want_params,
                       const std::vector<Values>& want_state, const std::string& label) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const double rel = dtype == DType::f64 ? 1e-14 : 2e-6;
    Parameter p = make_param(dtype);
    Opt opt({{"layer.weight", &p}}, options);
    for (int s = 0; s < 3; ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
      const std::string what = label + " " + std::string(dtype_name(dtype)) + " step " + std::to_string(s + 1);
      expect_near(values_of(p.value), want_params[s], rel, what);
      if (!want_state.empty()) expect_near(values_of(opt.named_state().at(0).tensor), want_state[s], rel, what + " state");
    }
    EXPECT_EQ(opt.step_count(), 3);
  }
}

}  // namespace

TEST(Sgd, PlainStepsFollowTheGradient) {
  // p - 0.1 g, by hand: 0.5 - 0.01 = 0.49, ...
  check_three_steps<Sgd>(SgdOptions{.lr = 0.1},
                         {{0.49, -0.98, 1.97, -0.04}, {0.54, -1.005, 1.97, -0.14}, {0.52, -1.025, 1.98, -0.11}}, {},
                         "sgd");
}

TEST(Sgd, MomentumWithDampeningAndWeightDecayMatchesPyTorch) {
  // Step 1: d = g + 0.01 p, buffer = d (no dampening on the first step), p -= 0.1 d.
  check_three_steps<Sgd>(
      SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
      {{0.4895, -0.979, 1.968, -0.04},
       {0.52460945, -0.9817189, 1.9374288, -0.165964},
       {0.537735806495, -1.00128236299, 1.91717103408, -0.2521822324}},
      {{0.105, -0.21, 0.32, 0.4},
       {-0.3510945, 0.027189, 0.305712, 1.25964},
       {-0.13126356495, 0.1956346299, 0.2025776592, 0.862182324}},
      "sgd momentum");
}

TEST(Sgd, NesterovMatchesPyTorch) {
  check_three_steps<Sgd>(SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
                         {{0.48005, -0.9601, 1.9392, -0.076},
                          {0.565632905, -0.98876581, 1.90959552, -0.2982556},
                          {0.5590148619805, -1.029050473961, 1.900068536512, -0.35078735436}},
                         {{0.105, -0.21, 0.32, 0.4},
                          {-0.4006995, 0.051399, 0.307392, 1.35924},
                          {-0.15497322095, 0.2363714419, 0.1957487552, 0.920333444}},
                         "sgd nesterov");
}

TEST(AdamW, MatchesPyTorchWithBiasCorrectionAndDecoupledDecay) {
  // Step 1, element 0 by hand: p = 0.5 (1 - 0.05) = 0.475; m = 0.05, v = 0.0025;
  // p -= 0.1/0.5 * 0.05 / (0.05/0.5 + 0.001) = 0.0990099... -> 0.37599009900990099.
  check_three_steps<AdamW>(AdamWOptions{.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75, .eps = 1e-3, .weight_decay = 0.5},
                           {{0.37599009900990099, -0.85049751243781095, 1.8003322259136213, -0.099750623441396509},
                            {0.4351953275795224, -0.85128015057815666, 1.6596560527594197, -0.19463824832425802},
                            {0.41792077066510042, -0.88064184594114748, 1.5854421064302535, -0.21189605163903943}},
                           {{0.05, -0.1, 0.15, 0.2}, {-0.225, 0.075, 0.075, 0.6}, {-0.0125, 0.1375, -0.0125, 0.15}},
                           "adamw");
  check_three_steps<AdamW>(AdamWOptions{.lr = 0.01, .weight_decay = 0.01},
                           {{0.4899500009999999, -0.98990000049999997, 1.9898000003333333, -0.0099999997500000062},
                            {0.49588454765513346, -0.99142833304476742, 1.9829004381078821, -0.019396073982054404},
                            {0.49780690843256245, -0.9957820563980994, 1.9798107945910832, -0.02467640334966543}},
                           {}, "adamw defaults");
}

TEST(AdamW, SecondMomentStateAndLearningRateSchedule) {
  Parameter p = make_param(DType::f64);
  AdamW opt({{"w", &p}}, {.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75, .eps = 1e-3, .weight_decay = 0.5});
  set_grad(p, kGrads[0]);
  opt.step();
  const auto state = opt.named_state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[1].name, "w.exp_avg_sq");
  expect_near(values_of(state[1].tensor), {0.0025, 0.01, 0.0225, 0.04}, 1e-15, "exp_avg_sq");
  opt.set_learning_rate(0.0);
  opt.zero_grad();
  EXPECT_EQ(values_of(p.grad), Values(4, 0.0));
  const Values before = values_of(p.value);
  set_grad(p, kGrads[1]);
  opt.step();  // lr 0: neither decay nor update moves the weights
  EXPECT_EQ(values_of(p.value), before);
  EXPECT_EQ(opt.learning_rate(), 0.0);
}

TEST(Optimizer, StateFollowsEachParametersShapeAndPlacement) {
  // A column shard [rows 3..5) of a [7, 3] master weight and a replicated bias.
  Parameter w(Tensor::zeros({2, 3}, DType::f32), {7, 3}, MeshPlacement{{}, Placement::shard(0), {}}, {3, 0});
  Parameter b(Tensor::zeros({3}, DType::f64));
  const NamedParameters params = {{"mlp.up.weight", &w}, {"mlp.up.bias", &b}};
  AdamW adam(params);
  const auto state = adam.named_state();
  ASSERT_EQ(state.size(), 4u);
  const std::vector<std::string> names = {"mlp.up.weight.exp_avg", "mlp.up.weight.exp_avg_sq", "mlp.up.bias.exp_avg",
                                          "mlp.up.bias.exp_avg_sq"};
  for (std::size_t i = 0; i < state.size(); ++i) {
    const Parameter& p = i < 2 ? w : b;
    EXPECT_EQ(state[i].name, names[i]);
    EXPECT_EQ(state[i].tensor.shape(), p.value.shape()) << names[i];
    EXPECT_EQ(state[i].tensor.dtype(), p.value.dtype()) << names[i];
    EXPECT_TRUE(state[i].tensor.device() == p.value.device()) << names[i];
    EXPECT_EQ(state[i].global_shape, p.global_shape) << names[i];
    EXPECT_EQ(state[i].placement, p.placement) << names[i];
    EXPECT_EQ(state[i].local_offset, p.local_offset) << names[i];
    EXPECT_NE(state[i].tensor.data(), p.value.data()) << names[i];
  }
  Sgd sgd(params, {.lr = 0.1, .momentum = 0.9});
  const auto buffers = sgd.named_state();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].name, "mlp.up.weight.momentum_buffer");
  EXPECT_EQ(buffers[0].placement, w.placement);
  EXPECT_EQ(buffers[0].global_shape, (Shape{7, 3}));
  EXPECT_EQ(buffers[0].local_offset, (Shape{3, 0}));
  EXPECT_TRUE(Sgd(params, {.lr = 0.1}).named_state().empty());  // no momentum, no state
}

TEST(Optimizer, StateRestoredThroughNamedStateContinuesTheRun) {
  // What a checkpoint round trip does: copy the state and the step count into a fresh
  // optimizer; the next steps must equal the uninterrupted run's.
  for (int which = 0; which < 2; ++which) {
    Parameter a = make_param(DType::f64), b = make_param(DType::f64);
    std::unique_ptr<Optimizer> run, resumed;
    if (which == 0) {
      run = std::make_unique<AdamW>(NamedParameters{{"w", &a}}, AdamWOptions{.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75});
      resumed = std::make_unique<AdamW>(NamedParameters{{"w", &b}}, AdamWOptions{.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75});
    } else {
      run = std::make_unique<Sgd>(NamedParameters{{"w", &a}}, SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
      resumed = std::make_unique<Sgd>(NamedParameters{{"w", &b}}, SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
    }
    for (int s = 0; s < 2; ++s) {
      set_grad(a, kGrads[s]);
      run->step();
    }
    b.value.copy_from(a.value);
    const auto from = run->named_state();
    const auto to = resumed->named_state();
    ASSERT_EQ(from.size(), to.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
      Tensor dst = to[i].tensor;
      dst.copy_from(from[i].tensor);
    }
    resumed->set_step_count(run->step_count());
    set_grad(a, kGrads[2]);
    set_grad(b, kGrads[2]);
    run->step();
    resumed->step();
    EXPECT_EQ(values_of(a.value), values_of(b.value)) << run->type_name();
  }
}

TEST(Optimizer, BadOptionsNameTheOptionAndValue) {
  Parameter p = make_param(DType::f32);
  const NamedParameters params = {{"w", &p}};
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.lr = -0.5}); }, {"Sgd", "lr", "-0.5"});
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.momentum = -1}); }, {"momentum", "-1"});
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.dampening = 2}); }, {"dampening", "2"});
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.weight_decay = -0.1}); }, {"weight_decay", "-0.1"});
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.nesterov = true}); }, {"nesterov", "momentum"});
  expect_error<InvalidArgument>([&] { (void)Sgd(params, {.momentum = 0.9, .dampening = 0.5, .nesterov = true}); },
                                       {"nesterov", "dampening = 0.5"});
  expect_error<InvalidArgument>([&] { (void)AdamW(params, {.beta1 = 1.0}); }, {"AdamW", "beta1", "1"});
  expect_error<InvalidArgument>([&] { (void)AdamW(params, {.beta2 = -0.1}); }, {"beta2", "-0.1"});
  expect_error<InvalidArgument>([&] { (void)AdamW(params, {.eps = -1e-8}); }, {"eps", "-1e-08"});
  expect_error<InvalidArgument>([&] { (void)AdamW(params, {.lr = std::nan("")}); }, {"lr", "nan"});
  expect_error<InvalidArgument>([&] { (void)AdamW(params, {.weight_decay = -1}); }, {"weight_decay"});
  AdamW ok(params);
  expect_error<InvalidArgument>([&] { ok.set_learning_rate(-1); }, {"lr", "-1"});
  EXPECT_EQ(ok.learning_rate(), 1e-3);
}

TEST(Optimizer, BadParametersNameTheParameter) {
  Parameter p = make_param(DType::f32);
  Parameter q(Tensor::zeros({2}, DType::bf16));
  expect_error<InvalidArgument>([&] { (void)AdamW(NamedParameters{}); }, {"empty"});
  expect_error<InvalidArgument>([&] { (void)AdamW({{"a.w", nullptr}}); }, {"a.w", "null"});
  expect_error<InvalidArgument>([&] { (void)AdamW({{"a.w", &p}, {"a.w", &p}}); }, {"a.w", "twice"});
  expect_error<InvalidArgument>([&] { (void)AdamW({{"a.w", &p}, {"b.w", &p}}); }, {"b.w", "same Parameter"});
  expect_error<UnsupportedError>([&] { (void)Sgd({{"emb.weight", &q}}); }, {"emb.weight", "bf16"});
  Sgd sgd({{"head.weight", &p}}, {.lr = 0.1});
  p.grad = Tensor::zeros({4}, DType::f32);
  expect_error<ShapeError>([&] { sgd.step(); }, {"head.weight", "gradient"});
  EXPECT_THROW(sgd.set_step_count(-1), InvalidArgument);
}
