// Vocab-parallel cross-entropy at tp = 1, 2, 4 against a serial reference computed here.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/mappings.hpp"

using namespace tessera;

namespace {

constexpr std::int64_t kIgnore = -100;

// Logits with a wide range (to exercise the max subtraction): row i, column j.
std::vector<double> logits_values(std::int64_t n, std::int64_t v) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < v; ++j) out.push_back(std::sin(0.7 * i + 1.3 * j) * 30.0 + (i == 2 ? 500.0 : 0.0));
  return out;
}

struct Serial {
  double loss = 0;
  std::vector<double> grad;
};

Serial serial_cross_entropy(const std::vector<double>& x, const std::vector<std::int64_t>& t, std::int64_t v) {
  const std::int64_t n = static_cast<std::int64_t>(t.size());
  Serial s;
  s.grad.assign(x.size(), 0.0);
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < n; ++i) counted += t[i] != kIgnore;
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == kIgnore) continue;
    double m = -1e300;
    for (std::int64_t j = 0; j < v; ++j) m = std::max(m, x[i * v + j]);
    double z = 0;
    for (std::int64_t j = 0; j < v; ++j) z += std::exp(x[i * v + j] - m);
    s.loss += (std::log(z) + m - x[i * v + t[i]]) / counted;
    for (std::int64_t j = 0; j < v; ++j) {
      s.grad[i * v + j] = (std::exp(x[i * v + j] - m) / z - (j == t[i] ? 1.0 : 0.0)) / counted;
    }
  }
  return s;
}

}  // namespace

TEST(VocabParallelCrossEntropy, MatchesSerialLossAndGradientWithIgnoreIndex) {
  Communicator tp(MPI_COMM_WORLD);
  const std::int64_t n = 6, v = 8;
  const auto x = logits_values(n, v);
  const std::vector<std::int64_t> targets = {3, kIgnore, 7, 0, 5, kIgnore};
  for (DType dtype : {DType::f64, DType::f32}) {
    // The reference sees exactly the logits the layer sees (f32-rounded for f32).
    std::vector<double> seen = x;
    if (dtype == DType::f32) for (double& e : seen) e = static_cast<float>(e);
    const Serial expected = serial_cross_entropy(seen, targets, v);
    Tensor full = Tensor::from_vector(x, {n, v});
    if (dtype == DType::f32) full = Tensor::from_vector(std::vector<float>(x.begin(), x.end()), {n, v});
    const Tensor local = tp::split_along(full, 1, tp);
    const auto result = tp::vocab_parallel_cross_entropy(local, Tensor::from_vector(targets, {n}), tp, kIgnore);
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
    EXPECT_NEAR(result.loss, expected.loss, tol * std::abs(expected.loss)) << dtype_name(dtype);
    EXPECT_EQ(result.counted, 4);
    // The local gradient is this rank's columns of the serial gradient.
    Tensor expected_grad = tp::split_along(Tensor::from_vector(expected.grad, {n, v}), 1, tp);
    const auto want = expected_grad.to_vector<double>();
    std::vector<double> got;
    if (dtype == DType::f64) {
      got = result.grad_logits.to_vector<double>();
    } else {
      for (float g : result.grad_logits.to_vector<float>()) got.push_back(g);
    }
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], dtype == DType::f64 ? 1e-14 : 1e-6);
    // Ignored rows have zero gradient.
    const std::int64_t vl = local.size(1);
    for (std::int64_t j = 0; j < vl; ++j) EXPECT_EQ(got[1 * vl + j], 0.0);
  }
}

TEST(VocabParallelCrossEntropy, AllIgnoredAndBadTargets) {
  Communicator tp(MPI_COMM_WORLD);
  const std::int64_t v = 4 * tp.size();
  const Tensor logits = Tensor::zeros({2, 4}, DType::f32);
  const auto none = tp::vocab_parallel_cross_entropy(logits, Tensor::from_vector<std::int64_t>({kIgnore, kIgnore}, {2}), tp);
  EXPECT_EQ(none.loss, 0.0);
  EXPECT_EQ(none.counted, 0);
  for (float g : none.grad_logits.to_vector<float>()) EXPECT_EQ(g, 0.0f);
  // Uniform logits: loss = log V.
  const auto uniform = tp::vocab_parallel_cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, v - 1}, {2}), tp);
  EXPECT_NEAR(uniform.loss, std::log(static_cast<double>(v)), 1e-6);
  try {
    tp::vocab_parallel_cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, v}, {2}), tp);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("target " + std::to_string(v) + " of row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tp::vocab_parallel_cross_entropy(logits, Tensor::zeros({2}, DType::f32), tp), ShapeError);
}

// A bad target on one rank only (the ranks disagree on the targets) still fails on every
// rank with the same error: the check rides on the MAX all-reduce, no rank waits alone.
TEST(VocabParallelCrossEntropy, BadTargetOnOneRankFailsEverywhere) {
  Communicator tp(MPI_COMM_WORLD);
  const std::int64_t v = 4 * tp.size();
  const Tensor logits = Tensor::zeros({2, 4}, DType::f32);
  const bool me = tp.rank() == tp.size() - 1;
  std::string message;
  try {
    tp::vocab_parallel_cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, me ? v + 3 : 1}, {2}), tp);
    ADD_FAILURE() << "no error on rank " << tp.rank();
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("target " + std::to_string(v + 3) + " of row 1"), std::string::npos) << message;
  int length = static_cast<int>(message.size()), longest = 0;
  MPI_Allreduce(&length, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(length, longest);  // the same text everywhere
}
