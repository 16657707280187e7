// Embedding and functional::embedding: lookup against a naive copy, scatter-add
// backward (duplicated ids included) against finite differences, the vocab-parallel
// mask, and out-of-range ids.

#include <gtest/gtest.h>

#include <limits>

#include "nn_test_util.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {
Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Shape& shape) { return Tensor::from_vector(ids, shape); }
}  // namespace

TEST(Embedding, ParametersAndInitSpec) {
  nn::Embedding emb(10, 4);
  EXPECT_EQ(emb.type_name(), "Embedding");
  EXPECT_EQ(emb.num_embeddings(), 10);
  EXPECT_EQ(emb.embedding_dim(), 4);
  EXPECT_EQ(emb.weight.value.shape(), (Shape{10, 4}));
  EXPECT_EQ(emb.weight.init.type, InitType::normal);
  EXPECT_DOUBLE_EQ(emb.weight.init.mean, 0.0);
  EXPECT_DOUBLE_EQ(emb.weight.init.std, 1.0);
  auto names = emb.named_parameters("tok");
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].first, "tok.weight");
}

TEST(Embedding, ForwardCopiesRows) {
  nn::Embedding emb(7, 3, DType::f64);
  fill_parameters(emb, 501);
  const std::vector<std::int64_t> ids{3, 0, 6, 3, 1, 5};
  Tensor y = emb.forward(ids_tensor(ids, {2, 3}));
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  const auto w = to_doubles(emb.weight.value);
  std::vector<double> ref;
  for (auto id : ids)
    for (int d = 0; d < 3; ++d) ref.push_back(w[id * 3 + d]);
  EXPECT_EQ(to_doubles(y), ref);  // a lookup is exact
}

TEST(Embedding, BackwardScatterAddsMatchesFiniteDifferences) {
  nn::Embedding emb(6, 3, DType::f64);
  fill_parameters(emb, 511);
  // Duplicated ids (2 three times) must add their gradients; row 4 gets none.
  Tensor ids = ids_tensor({2, 0, 2, 5, 1, 2, 3, 0}, {4, 2});
  check_gradients(emb, ids, 512, /*check_input=*/false);
  emb.zero_grad();
  emb.forward(ids);
  Tensor dy = random_tensor({4, 2, 3}, DType::f64, 513);
  Tensor dx = emb.backward(dy);
  EXPECT_FALSE(dx.defined());  // ids have no gradient
  const auto g = to_doubles(emb.weight.grad);
  const auto d = to_doubles(dy);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(g[2 * 3 + c], d[0 * 3 + c] + d[2 * 3 + c] + d[5 * 3 + c], 1e-15);
    EXPECT_EQ(g[4 * 3 + c], 0.0);
  }
}

TEST(Embedding, F32ForwardMatchesF64AndAccumulates) {
  nn::Embedding e64(5, 4, DType::f64);
  nn::Embedding e32(5, 4, DType::f32);
  fill_parameters(e64, 521);
  copy_parameters(e64, e32);
  Tensor ids = ids_tensor({4, 1, 1, 0}, {4});
  expect_close(to_doubles(e32.forward(ids)), to_doubles(e64.forward(ids)), 1e-7, "f32 vs f64");
  check_accumulation(e64, ids, 522);
}

TEST(Embedding, VocabParallelShardsSumToTheFullTable) {
  // Two shards of an 8-row table: rows [0, 5) and [5, 8) (uneven, as shard_range gives).
  Tensor full = random_tensor({8, 3}, DType::f64, 531);
  Tensor shard0 = full.narrow(0, 0, 5).contiguous();
  Tensor shard1 = full.narrow(0, 5, 3).contiguous();
  Tensor ids = ids_tensor({7, 0, 4, 5, 2, 7}, {2, 3});
  Tensor y_full = F::embedding(ids, full);
  Tensor y0 = F::embedding(ids, shard0, 0, true);
  Tensor y1 = F::embedding(ids, shard1, 5, true);
  const auto a = to_doubles(y0), b = to_doubles(y1), ref = to_doubles(y_full);
  const std::vector<std::int64_t> idv{7, 0, 4, 5, 2, 7};
  for (std::size_t k = 0; k < idv.size(); ++k)
    for (int d = 0; d < 3; ++d) {
      const std::size_t i = k * 3 + d;
      // Exactly one shard owns each id; the other answers an exact zero.
      EXPECT_EQ(idv[k] < 5 ? b[i] : a[i], 0.0) << "id " << idv[k];
      EXPECT_EQ(a[i] + b[i], ref[i]);
    }

  // Backward: each shard accumulates only its own rows; together they equal the full grad.
  Tensor dy = random_tensor({2, 3, 3}, DType::f64, 532);
  Tensor g_full = Tensor::zeros({8, 3}, DType::f64);
  Tensor g0 = Tensor::zeros({5, 3}, DType::f64);
  Tensor g1 = Tensor::zeros({3, 3}, DType::f64);
  F::embedding_backward(dy, ids, g_full);
  F::embedding_backward(dy, ids, g0, 0);
  F::embedding_backward(dy, ids, g1, 5);
  std::vector<double> joined = to_doubles(g0);
  for (double v : to_doubles(g1)) joined.push_back(v);
  EXPECT_EQ(joined, to_doubles(g_full));
}

TEST(Embedding, OutOfRangeIdsAndBadInputs) {
  nn::Embedding emb(10, 4);
  expect_error<InvalidArgument>([&] { emb.forward(ids_tensor({1, 10, 2}, {3})); },
                                {"Embedding(10, 4)", "id 10", "table of 10 rows"});
  expect_error<InvalidArgument>([&] { emb.forward(ids_tensor({-1}, {1})); }, {"Embedding(10, 4)", "id -1"});
  Tensor float_ids = Tensor::zeros({3}, DType::f32);
  expect_error<ShapeError>([&] { emb.forward(float_ids); }, {"Embedding(10, 4)", float_ids.str(), "i64"});
  // A shard without masking names its row range.
  Tensor shard = Tensor::zeros({4, 2}, DType::f32);
  expect_error<InvalidArgument>([&] { F::embedding(ids_tensor({3}, {1}), shard, 4, false); },
                                {"nn::functional::embedding", "id 3", "[4, 8)"});
  // Mismatched grad dtype.
  Tensor gw = Tensor::zeros({10, 4}, DType::f64);
  Tensor dy = Tensor::zeros({3, 4}, DType::f32);
  expect_error<ShapeError>([&] { F::embedding_backward(dy, ids_tensor({1, 2, 3}, {3}), gw); },
                           {"nn::functional::embedding_backward", dy.str(), gw.str()});
  expect_error<InvalidArgument>([] { nn::Embedding(0, 4); }, {"Embedding(0, 4)"});
}

// ---- PyTorch nn.Embedding's options (the torch numerics themselves are compared in
// tests/tp/check_embedding_torch.py).

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
nn::EmbeddingOptions padding(std::int64_t idx) {
  nn::EmbeddingOptions o;
  o.padding_idx = idx;
  return o;
}
// Row r of a [rows, dim] value vector.
std::vector<double> row_of(const std::vector<double>& table, std::int64_t r, std::int64_t dim) {
  return {table.begin() + r * dim, table.begin() + (r + 1) * dim};
}
}  // namespace

TEST(EmbeddingOptions, ResolveChecksAndDescribes) {
  nn::Embedding last(10, 4, padding(-1));
  EXPECT_EQ(*last.options().padding_idx, 9);  // negative counts from the end, as PyTorch
  EXPECT_EQ(last.describe(), "Embedding(10, 4, padding_idx=9)");
  nn::EmbeddingOptions all;
  all.max_norm = 1.5;
  all.norm_type = 1;
  all.scale_grad_by_freq = true;
  EXPECT_EQ(nn::Embedding(10, 4, all).describe(), "Embedding(10, 4, max_norm=1.5, norm_type=1, scale_grad_by_freq=true)");
  expect_error<InvalidArgument>([] { nn::Embedding(10, 4, padding(10)); },
                                {"Embedding(10, 4, padding_idx=10)", "padding_idx 10", "[-10, 10)"});
  expect_error<InvalidArgument>([] { nn::Embedding(10, 4, padding(-11)); }, {"padding_idx -11"});
  nn::EmbeddingOptions negative;
  negative.max_norm = -1;
  expect_error<InvalidArgument>([&] { nn::Embedding(10, 4, negative); }, {"max_norm -1", ">= 0"});
  nn::EmbeddingOptions sparse;
  sparse.sparse = true;
  expect_error<UnsupportedError>([&] { nn::Embedding(10, 4, sparse); }, {"Embedding(10, 4", "sparse", "dense"});
  // The functional backward takes resolved options only.
  Tensor gw = Tensor::zeros({10, 4}, DType::f64);
  expect_error<InvalidArgument>(
      [&] { F::embedding_backward(Tensor::zeros({1, 4}, DType::f64), ids_tensor({1}, {1}), gw, 0, padding(-1)); },
      {"padding_idx -1", "resolve_embedding_options"});
}

TEST(EmbeddingOptions, PaddingRowStartsZeroAndGetsNoGradient) {
  nn::Embedding emb(6, 3, padding(2), DType::f64);
  // Drawn like any row, then zeroed by after_initialize(), as torch.nn.Embedding does.
  emb.weight.value.copy_from(random_tensor({6, 3}, DType::f64, 540));
  EXPECT_NE(row_of(to_doubles(emb.weight.value), 2, 3), std::vector<double>(3, 0.0));
  initialize_parameters(emb, 7);
  const auto w = to_doubles(emb.weight.value);
  EXPECT_EQ(row_of(w, 2, 3), std::vector<double>(3, 0.0));
  EXPECT_NE(row_of(w, 1, 3), std::vector<double>(3, 0.0));  // only the padding row
  // Forward still looks the row up (zeros); backward skips it, every other row adds.
  Tensor ids = ids_tensor({2, 0, 2, 5}, {4});
  Tensor y = emb.forward(ids);
  EXPECT_EQ(row_of(to_doubles(y), 0, 3), std::vector<double>(3, 0.0));
  Tensor dy = random_tensor({4, 3}, DType::f64, 541);
  emb.backward(dy);
  const auto g = to_doubles(emb.weight.grad), d = to_doubles(dy);
  EXPECT_EQ(row_of(g, 2, 3), std::vector<double>(3, 0.0));
  EXPECT_EQ(row_of(g, 0, 3), row_of(d, 1, 3));
  EXPECT_EQ(row_of(g, 5, 3), row_of(d, 3, 3));
}

TEST(EmbeddingOptions, ScaleGradByFrequencyDividesByOccurrences) {
  nn::EmbeddingOptions o;
  o.scale_grad_by_freq = true;
  o.padding_idx = 4;
  nn::Embedding emb(6, 2, o, DType::f64);
  fill_parameters(emb, 551);
  // 1 three times, 3 twice, 0 once, 4 (padding) twice.
  Tensor ids = ids_tensor({1, 3, 1, 0, 4, 1, 3, 4}, {2, 4});
  emb.forward(ids);
  Tensor dy = random_tensor({2, 4, 2}, DType::f64, 552);
  emb.backward(dy);
  const auto g = to_doubles(emb.weight.grad), d = to_doubles(dy);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(g[1 * 2 + c], (d[0 * 2 + c] + d[2 * 2 + c] + d[5 * 2 + c]) / 3, 1e-15);
    EXPECT_NEAR(g[3 * 2 + c], (d[1 * 2 + c] + d[6 * 2 + c]) / 2, 1e-15);
    EXPECT_EQ(g[0 * 2 + c], d[3 * 2 + c]);
    EXPECT_EQ(g[4 * 2 + c], 0.0);
    EXPECT_EQ(g[5 * 2 + c], 0.0);
  }
  // A second backward accumulates on top (the scale applies to the new rows only).
  emb.forward(ids);
  emb.backward(dy);
  const auto g2 = to_doubles(emb.weight.grad);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g2[i], 2 * g[i], 1e-15);
}

TEST(EmbeddingOptions, MaxNormRenormalisesLookedUpRowsInPlace) {
  // Rows: 0 has 2-norm 5 (3, 4, 0); 1 has 2-norm 0.5; 2 has 2-norm 13 (5, 12, 0); 3 is
  // never looked up (norm 10).
  const std::vector<double> table{3, 4, 0, 0.3, 0.4, 0, 5, -12, 0, 6, 8, 0};
  for (double p : {2.0, 1.0, kInf}) {
    nn::EmbeddingOptions o;
    o.max_norm = 2.0;
    o.norm_type = p;
    nn::Embedding emb(4, 3, o, DType::f64);
    assign(emb.weight.value, table);
    Tensor ids = ids_tensor({2, 0, 1, 2, 0}, {5});  // duplicates are rescaled once
    Tensor y = emb.forward(ids);
    const auto w = to_doubles(emb.weight.value);
    auto norm = [&](std::int64_t r) {
      double s = 0, m = 0;
      for (int c = 0; c < 3; ++c) {
        s += p == 1.0 ? std::abs(table[r * 3 + c]) : table[r * 3 + c] * table[r * 3 + c];
        m = std::max(m, std::abs(table[r * 3 + c]));
      }
      return p == 2.0 ? std::sqrt(s) : (p == 1.0 ? s : m);
    };
    for (std::int64_t r : {0, 2}) {
      const double scale = 2.0 / (norm(r) + 1e-7);  // PyTorch's factor
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(w[r * 3 + c], table[r * 3 + c] * scale, 1e-15) << "p " << p;
    }
    EXPECT_EQ(row_of(w, 1, 3), row_of(table, 1, 3)) << "below max_norm: untouched, p " << p;
    EXPECT_EQ(row_of(w, 3, 3), row_of(table, 3, 3)) << "not looked up: untouched, p " << p;
    // The lookup returns the renormalised rows.
    EXPECT_EQ(row_of(to_doubles(y), 0, 3), row_of(w, 2, 3));
    EXPECT_EQ(row_of(to_doubles(y), 4, 3), row_of(w, 0, 3));
    // A bad id fails before the table is touched.
    assign(emb.weight.value, table);
    EXPECT_THROW(emb.forward(ids_tensor({0, 4}, {2})), InvalidArgument);
    EXPECT_EQ(to_doubles(emb.weight.value), table);
  }
}

TEST(EmbeddingOptions, RenormNormTypesAndShardPartials) {
  // p = 3, 0 and -inf, and a table split in two column blocks whose partials combine
  // (by the reduction embedding_norm_reduction names) to the whole row's norm.
  const std::vector<double> table{1, -2, 3, 0.5, 0, 4, -1, 2};  // 2 rows of 4
  Tensor ids = ids_tensor({1, 0}, {2});
  for (double p : {3.0, 0.0, -kInf, 0.5}) {
    Tensor whole = make_tensor(table, {2, 4}, DType::f64);
    F::embedding_renorm_(ids, whole, 0.4, p);
    Tensor left = make_tensor({1, -2, 0, 4}, {2, 2}, DType::f64);
    const Tensor right = make_tensor({3, 0.5, -1, 2}, {2, 2}, DType::f64);
    // Both halves see the other's partials through `combine`, as tp ranks would.
    Tensor left_partials, right_partials;
    F::embedding_renorm_(ids, left, 0.4, p, 0, false, [&](Tensor& partials, F::NormReduction r) {
      left_partials = partials.contiguous();
      EXPECT_EQ(r, F::embedding_norm_reduction(p));
      // The right half's partials, computed the same way.
      Tensor right_copy = right.clone();
      F::embedding_renorm_(ids, right_copy, 1e300, p, 0, false, [&](Tensor& rp, F::NormReduction) {
        right_partials = rp.contiguous();
      });
      const auto a = to_doubles(left_partials), b = to_doubles(right_partials);
      std::vector<double> combined(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        combined[i] = r == F::NormReduction::sum ? a[i] + b[i] : (r == F::NormReduction::max ? std::max(a[i], b[i])
                                                                                           : std::min(a[i], b[i]));
      }
      partials.copy_from(make_tensor(combined, partials.shape(), DType::f64));
    });
    // The reference: each row's norm by its definition, PyTorch's factor.
    const auto w = to_doubles(whole), l = to_doubles(left);
    for (int r = 0; r < 2; ++r) {
      double n = 0;
      if (p == 0.0) {
        for (int c = 0; c < 4; ++c) n += table[r * 4 + c] != 0;
      } else if (p == -kInf) {
        n = kInf;
        for (int c = 0; c < 4; ++c) n = std::min(n, std::abs(table[r * 4 + c]));
      } else {
        for (int c = 0; c < 4; ++c) n += std::pow(std::abs(table[r * 4 + c]), p);
        n = std::pow(n, 1 / p);
      }
      const double scale = n > 0.4 ? 0.4 / (n + 1e-7) : 1.0;
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(w[r * 4 + c], table[r * 4 + c] * scale, 1e-14) << "p " << p;
      for (int c = 0; c < 2; ++c) EXPECT_NEAR(l[r * 2 + c], table[r * 4 + c] * scale, 1e-14) << "p " << p;
    }
  }
  EXPECT_EQ(F::embedding_norm_reduction(2.0), F::NormReduction::sum);
  EXPECT_EQ(F::embedding_norm_reduction(kInf), F::NormReduction::max);
  EXPECT_EQ(F::embedding_norm_reduction(-kInf), F::NormReduction::min);
}
