// PyTorch nn.Embedding's options on the tensor-parallel embeddings, against the serial
// nn::Embedding at tp = 1, 2, 4: padding_idx, max_norm with every norm_type (the
// dim-sharded table all-reduces its ranks' partial row norms), scale_grad_by_freq, all
// together over two steps, and the conversions and initialisation that carry them.
// Forward output, the table after the in-place renorm, and the reassembled gradient.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "tessera/init.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::as_doubles;
using tessera::testing::pseudo_random;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kVocab = 8, kDim = 8;

class TpEmbeddingOptions : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

Tensor master_grad(const Parameter& p, Communicator& tp) { return tp::assemble_master(p, p.grad, tp); }

// A table whose rows have very different norms: row r is scaled by 0.25 * (r + 1), and
// rows 0 and 1 hold two exact zeros (for norm_type 0, which counts non-zeros, and -inf).
void fill_table(nn::Embedding& serial, std::uint64_t salt, DType dtype) {
  std::vector<double> v(kVocab * kDim);
  for (std::int64_t i = 0; i < kVocab * kDim; ++i) {
    const std::int64_t r = i / kDim, c = i % kDim;
    v[i] = r < 2 && c < 2 ? 0.0 : pseudo_random(salt, i) * 0.25 * (r + 1);
  }
  if (dtype == DType::f64) serial.weight.value.copy_from(Tensor::from_vector(v, {kVocab, kDim}));
  else serial.weight.value.copy_from(Tensor::from_vector(std::vector<float>(v.begin(), v.end()), {kVocab, kDim}));
}

// Ids over every shard, with repeats (3 three times, 6 twice) and without 5.
Tensor batch_ids() { return Tensor::from_vector<std::int64_t>({3, 0, 7, 3, 6, 1, 3, 2, 6, 4}, {2, 5}); }

// Runs `steps` forward/backward steps on the serial layer and on both tp layers made from
// it (before its first step), and compares outputs, tables and gradients after each.
void expect_twins(const nn::EmbeddingOptions& options, Communicator& tp, DType dtype, int steps,
                  const std::string& what) {
  const double rel = dtype == DType::f64 ? 1e-12 : 1e-5;
  nn::Embedding serial(kVocab, kDim, options, dtype);
  fill_table(serial, 61, dtype);
  auto by_dim = tp::ParallelEmbedding::from_serial(serial, tp, "tok");
  auto by_vocab = tp::VocabParallelEmbedding::from_serial(serial, tp, "tok");
  EXPECT_EQ(by_dim->options().padding_idx, serial.options().padding_idx) << what;
  EXPECT_EQ(by_vocab->options().max_norm, serial.options().max_norm) << what;
  const Tensor ids = batch_ids();
  for (int step = 0; step < steps; ++step) {
    const Tensor dy = random_tensor({2, 5, kDim}, 62 + step, dtype);
    const Tensor y_serial = serial.forward(ids);
    serial.backward(dy);
    const Tensor y_dim = by_dim->forward(ids);
    by_dim->backward(dy);
    const Tensor y_vocab = by_vocab->forward(ids);
    by_vocab->backward(dy);
    const std::string at = what + ", step " + std::to_string(step);
    EXPECT_TRUE(tensors_close(y_dim, y_serial, rel)) << at;
    EXPECT_TRUE(tensors_close(y_vocab, y_serial, rel)) << at;
    EXPECT_TRUE(tensors_close(by_dim->master_weight(), serial.weight.value, rel)) << at;
    EXPECT_TRUE(tensors_close(by_vocab->master_weight(), serial.weight.value, rel)) << at;
    EXPECT_TRUE(tensors_close(master_grad(by_dim->weight, tp), serial.weight.grad, rel)) << at;
    EXPECT_TRUE(tensors_close(master_grad(by_vocab->weight, tp), serial.weight.grad, rel)) << at;
  }
}

}  // namespace

TEST_F(TpEmbeddingOptions, PaddingIdxMatchesSerial) {
  for (std::int64_t padding_idx : {3, -2}) {
    nn::EmbeddingOptions o;
    o.padding_idx = padding_idx;
    expect_twins(o, tp, DType::f32, 1, "padding_idx " + std::to_string(padding_idx));
  }
  // The padding row's gradient is zero on every layout, though id 3 occurs three times.
  nn::EmbeddingOptions o;
  o.padding_idx = 3;
  nn::Embedding serial(kVocab, kDim, o);
  fill_table(serial, 63, DType::f32);
  auto by_vocab = tp::VocabParallelEmbedding::from_serial(serial, tp);
  by_vocab->forward(batch_ids());
  by_vocab->backward(random_tensor({2, 5, kDim}, 64));
  const auto g = as_doubles(master_grad(by_vocab->weight, tp));
  for (std::int64_t c = 0; c < kDim; ++c) {
    EXPECT_EQ(g[3 * kDim + c], 0.0);
    EXPECT_NE(g[0 * kDim + c], 0.0);
  }
}

TEST_F(TpEmbeddingOptions, ScaleGradByFreqMatchesSerial) {
  nn::EmbeddingOptions o;
  o.scale_grad_by_freq = true;
  expect_twins(o, tp, DType::f32, 1, "scale_grad_by_freq");
  o.padding_idx = 6;
  expect_twins(o, tp, DType::f64, 1, "scale_grad_by_freq, padding_idx 6");
}

TEST_F(TpEmbeddingOptions, MaxNormEveryNormTypeMatchesSerial) {
  // max_norm per norm_type so that some looked-up rows exceed it and others do not.
  const std::vector<std::pair<double, double>> cases{{2.0, 1.0}, {1.0, 2.5}, {3.0, 0.8},
                                                     {kInf, 0.6}, {-kInf, 0.05}, {0.0, 7.0}};
  for (const auto& [p, max_norm] : cases) {
    nn::EmbeddingOptions o;
    o.max_norm = max_norm;
    o.norm_type = p;
    const std::string what = "norm_type " + std::to_string(p) + ", max_norm " + std::to_string(max_norm);
    // The serial renorm must actually change some rows and keep others, or the
    // comparison below would prove nothing.
    nn::Embedding probe(kVocab, kDim, o, DType::f64);
    fill_table(probe, 61, DType::f64);
    const auto before = as_doubles(probe.weight.value);
    probe.forward(batch_ids());
    const auto after = as_doubles(probe.weight.value);
    int changed = 0, kept = 0;
    for (std::int64_t r : {0, 1, 2, 3, 4, 6, 7}) {
      const bool same = std::equal(before.begin() + r * kDim, before.begin() + (r + 1) * kDim, after.begin() + r * kDim);
      (same ? kept : changed) += 1;
    }
    EXPECT_GT(changed, 0) << what;
    EXPECT_GT(kept, 0) << what;
    EXPECT_TRUE(std::equal(before.begin() + 5 * kDim, before.begin() + 6 * kDim, after.begin() + 5 * kDim)) << what;

    expect_twins(o, tp, DType::f64, 2, what);
    expect_twins(o, tp, DType::f32, 1, what);
  }
}

TEST_F(TpEmbeddingOptions, DimShardedRenormUsesTheWholeRowsNorm) {
  // Row 7's 2-norm is above max_norm, while every rank's slice alone is below it at
  // tp > 1: without the all-reduce of the partial norms the row would be left alone.
  nn::EmbeddingOptions o;
  o.max_norm = 1.0;
  nn::Embedding serial(kVocab, kDim, o, DType::f64);
  serial.weight.value.copy_from(Tensor::zeros({kVocab, kDim}, DType::f64));
  std::vector<double> table(kVocab * kDim, 0.0);
  for (std::int64_t c = 0; c < kDim; ++c) table[7 * kDim + c] = 0.45;  // norm 0.45 * sqrt(8) = 1.27
  serial.weight.value.copy_from(Tensor::from_vector(table, {kVocab, kDim}));
  auto by_dim = tp::ParallelEmbedding::from_serial(serial, tp);
  const Tensor ids = Tensor::from_vector<std::int64_t>({7}, {1});
  serial.forward(ids);
  const Tensor y = by_dim->forward(ids);
  const double scale = 1.0 / (0.45 * std::sqrt(8.0) + 1e-7);
  for (double v : as_doubles(y)) EXPECT_NEAR(v, 0.45 * scale, 1e-15);
  EXPECT_TRUE(tensors_close(by_dim->master_weight(), serial.weight.value, 1e-15));
}

TEST_F(TpEmbeddingOptions, AllOptionsTogetherOverTwoSteps) {
  nn::EmbeddingOptions o;
  o.padding_idx = 0;
  o.max_norm = 1.2;
  o.norm_type = 2.0;
  o.scale_grad_by_freq = true;
  expect_twins(o, tp, DType::f64, 2, "all options");
  expect_twins(o, tp, DType::f32, 2, "all options");
}

TEST_F(TpEmbeddingOptions, InitialisedPaddingRowIsZeroAtEveryLayout) {
  nn::EmbeddingOptions serial_options;
  serial_options.padding_idx = 5;
  nn::Embedding serial(kVocab, kDim, serial_options);
  nn::initialize_parameters(serial, 71, "tok");  // after_initialize() zeroes the row
  tp::ParallelEmbeddingOptions o;
  o.padding_idx = 5;
  tp::ParallelEmbedding by_dim(kVocab, kDim, tp, o);
  tp::VocabParallelEmbedding by_vocab(kVocab, kDim, tp, o);
  nn::initialize_parameters(by_dim, 71, "tok");
  nn::initialize_parameters(by_vocab, 71, "tok");
  const auto w = as_doubles(serial.weight.value);
  for (std::int64_t c = 0; c < kDim; ++c) EXPECT_EQ(w[5 * kDim + c], 0.0);
  EXPECT_NE(w[4 * kDim], 0.0);
  EXPECT_TRUE(tensors_close(by_dim.master_weight(), serial.weight.value, 0));
  EXPECT_TRUE(tensors_close(by_vocab.master_weight(), serial.weight.value, 0));
  // to_serial carries the options back.
  auto back = by_vocab.to_serial();
  EXPECT_EQ(back->options().padding_idx, std::optional<std::int64_t>(5));
  EXPECT_EQ(back->describe(), "Embedding(8, 8, padding_idx=5)");
}

TEST_F(TpEmbeddingOptions, BadOptionsNameTheLayer) {
  tp::ParallelEmbeddingOptions o;
  o.name = "embed";
  o.sparse = true;
  try {
    tp::ParallelEmbedding(kVocab, kDim, tp, o);
    ADD_FAILURE() << "sparse accepted";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ParallelEmbedding 'embed'"), std::string::npos) << what;
    EXPECT_NE(what.find("sparse"), std::string::npos) << what;
  }
  o.sparse = false;
  o.padding_idx = kVocab;
  try {
    tp::VocabParallelEmbedding(kVocab, kDim, tp, o);
    ADD_FAILURE() << "padding_idx out of range accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("VocabParallelEmbedding 'embed'"), std::string::npos) << what;
    EXPECT_NE(what.find("padding_idx 8"), std::string::npos) << what;
  }
}
