// Embedding and functional::embedding: lookup against a naive copy, scatter-add
// backward (duplicated ids included) against finite differences, the vocab-parallel
// mask, and out-of-range ids.

#include <gtest/gtest.h>

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
