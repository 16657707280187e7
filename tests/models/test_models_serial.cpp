// Serial reference models: attention against a naive loop reference (with and without
// the causal mask), every backward against central finite differences (f64), stable
// FQNs, and the tensor-parallel contract — children reached through the tree at
// forward time, heads and hidden width taken from what the children produce — checked
// by replacing children the way parallelize will.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "../nn/nn_test_util.hpp"
#include "tessera/models/channel_mlp.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/swiglu.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

using Mat = std::vector<double>;  // row-major

// y[r, o] = sum_i x[r, i] w[o, i]; x [rows, in], w [out, in].
Mat naive_linear(const Mat& x, const Mat& w, std::int64_t rows, std::int64_t in, std::int64_t out) {
  Mat y(static_cast<std::size_t>(rows * out), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// Attention on [B, S, heads * hd] by the textbook formula: for each head, softmax over
// the unmasked keys of q.k / sqrt(hd), then the weighted sum of v.
Mat naive_attention(const Mat& q, const Mat& k, const Mat& v, std::int64_t B, std::int64_t S, std::int64_t heads,
                    std::int64_t hd, bool causal) {
  const std::int64_t W = heads * hd;
  Mat out(q.size(), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> w(static_cast<std::size_t>(S), 0.0);
        double total = 0;
        for (std::int64_t j = 0; j < S; ++j) {
          if (causal && j > i) continue;
          double s = 0;
          for (std::int64_t d = 0; d < hd; ++d) s += q[(b * S + i) * W + h * hd + d] * k[(b * S + j) * W + h * hd + d];
          w[j] = std::exp(s / std::sqrt(static_cast<double>(hd)));
          total += w[j];
        }
        for (std::int64_t j = 0; j < S; ++j)
          for (std::int64_t d = 0; d < hd; ++d)
            out[(b * S + i) * W + h * hd + d] += w[j] / total * v[(b * S + j) * W + h * hd + d];
      }
  return out;
}

nn::Linear& linear_at(nn::Module& m, const std::string& path) { return dynamic_cast<nn::Linear&>(m.at(path)); }

std::vector<std::string> parameter_names(nn::Module& m) {
  std::vector<std::string> names;
  for (auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a row-major [*, ld] matrix.
Mat block(const Mat& m, std::int64_t ld, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols) {
  Mat out;
  for (std::int64_t r = row0; r < row0 + rows; ++r)
    for (std::int64_t c = col0; c < col0 + cols; ++c) out.push_back(m[r * ld + c]);
  return out;
}

// A Linear(in, out, no bias) holding `weight` [out, in].
std::unique_ptr<nn::Linear> linear_with(std::int64_t in, std::int64_t out, const Mat& weight, DType dtype) {
  auto l = std::make_unique<nn::Linear>(in, out, false, dtype);
  assign(l->weight.value, weight);
  return l;
}

// What one tensor-parallel rank of `parts` holds of a MultiHeadAttention: the q/k/v
// rows and the o columns of its heads (column- and row-parallel shards).
void shard_attention(nn::MultiHeadAttention& full, nn::MultiHeadAttention& shard, std::int64_t part,
                     std::int64_t parts) {
  const std::int64_t D = full.d_model(), w = D / parts, off = part * w;
  for (const char* name : {"q", "k", "v"}) {
    Mat wt = to_doubles(linear_at(full, name).weight.value);
    shard.replace(name, linear_with(D, w, block(wt, D, off, w, 0, D), DType::f64));
  }
  Mat wo = to_doubles(linear_at(full, "o").weight.value);
  shard.replace("o", linear_with(w, D, block(wo, D, 0, D, off, w), DType::f64));
}

void shard_swiglu(nn::SwiGLU& full, nn::SwiGLU& shard, std::int64_t part, std::int64_t parts) {
  const std::int64_t D = full.d_model(), H = full.hidden(), w = H / parts, off = part * w;
  for (const char* name : {"gate", "up"}) {
    Mat wt = to_doubles(linear_at(full, name).weight.value);
    shard.replace(name, linear_with(D, w, block(wt, D, off, w, 0, D), DType::f64));
  }
  Mat wd = to_doubles(linear_at(full, "down").weight.value);
  shard.replace("down", linear_with(w, D, block(wd, H, 0, D, off, w), DType::f64));
}

}  // namespace

// ---------------------------------------------------------------- attention core

TEST(AttentionCore, MatchesNaiveReferenceWithAndWithoutMask) {
  const std::int64_t B = 2, S = 5, heads = 3, hd = 2, W = heads * hd;
  for (bool causal : {true, false}) {
    Tensor q = random_tensor({B, S, W}, DType::f64, 11, 2.0);
    Tensor k = random_tensor({B, S, W}, DType::f64, 12, 2.0);
    Tensor v = random_tensor({B, S, W}, DType::f64, 13);
    Tensor probs;
    Tensor out = F::attention_core(q, k, v, heads, causal, probs);
    expect_close(to_doubles(out), naive_attention(to_doubles(q), to_doubles(k), to_doubles(v), B, S, heads, hd, causal),
                 1e-13, causal ? "causal attention" : "full attention");
    ASSERT_EQ(probs.shape(), (Shape{B, heads, S, S}));
    // Rows of probabilities sum to 1, and the mask gives exact zeros above the diagonal.
    const Mat p = to_doubles(probs);
    for (std::int64_t r = 0; r < B * heads * S; ++r) {
      const std::int64_t i = r % S;
      double total = 0;
      for (std::int64_t j = 0; j < S; ++j) {
        total += p[r * S + j];
        if (causal && j > i) EXPECT_EQ(p[r * S + j], 0.0);
        if (!causal) EXPECT_GT(p[r * S + j], 0.0);
      }
      EXPECT_NEAR(total, 1.0, 1e-14);
    }
  }
}

TEST(AttentionCore, LargeScoresStayFinite) {
  // Scores of several hundred would overflow a naive exp(); the max-subtracted softmax
  // does not.
  Tensor q = random_tensor({1, 4, 2}, DType::f32, 21, 300.0);
  Tensor k = random_tensor({1, 4, 2}, DType::f32, 22, 300.0);
  Tensor v = random_tensor({1, 4, 2}, DType::f32, 23);
  Tensor probs;
  for (double e : to_doubles(F::attention_core(q, k, v, 1, true, probs))) EXPECT_TRUE(std::isfinite(e));
  for (double e : to_doubles(probs)) EXPECT_TRUE(std::isfinite(e));
}

TEST(AttentionCore, BackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, S = 4, heads = 2, hd = 3, W = heads * hd;
  for (bool causal : {true, false}) {
    Tensor q = random_tensor({B, S, W}, DType::f64, 31);
    Tensor k = random_tensor({B, S, W}, DType::f64, 32);
    Tensor v = random_tensor({B, S, W}, DType::f64, 33);
    const Mat r = random_values(B * S * W, 34);
    Tensor probs;
    F::attention_core(q, k, v, heads, causal, probs);
    F::AttentionGrads g = F::attention_core_backward(make_tensor(r, q.shape(), DType::f64), q, k, v, probs, heads);
    const double eps = 1e-6;
    for (auto [t, grad, name] : {std::tuple{q, g.q, "dq"}, std::tuple{k, g.k, "dk"}, std::tuple{v, g.v, "dv"}}) {
      double* xs = t.data<double>();
      Mat numeric(static_cast<std::size_t>(t.numel()));
      for (std::size_t i = 0; i < numeric.size(); ++i) {
        const double keep = xs[i];
        Tensor scratch;
        xs[i] = keep + eps;
        const double up = dot(to_doubles(F::attention_core(q, k, v, heads, causal, scratch)), r);
        xs[i] = keep - eps;
        const double down = dot(to_doubles(F::attention_core(q, k, v, heads, causal, scratch)), r);
        xs[i] = keep;
        numeric[i] = (up - down) / (2 * eps);
      }
      expect_close(to_doubles(grad), numeric, 1e-7, std::string(name) + (causal ? " causal" : " full"));
    }
  }
}

TEST(AttentionCore, Errors) {
  Tensor q = Tensor::zeros({2, 3, 6}, DType::f64);
  Tensor probs;
  expect_error<ShapeError>([&] { F::attention_core(q, q, q, 4, true, probs); },
                           {"attention_core", "heads = 4", q.str()});
  Tensor k = Tensor::zeros({2, 4, 6}, DType::f64);
  expect_error<ShapeError>([&] { F::attention_core(q, k, q, 2, true, probs); }, {"attention_core", k.str()});
  Tensor qf = Tensor::zeros({2, 3, 6}, DType::f32);
  expect_error<ShapeError>([&] { F::attention_core(q, qf, q, 2, true, probs); }, {"attention_core", "dtype"});
  Tensor q2 = Tensor::zeros({6, 6}, DType::f64);
  expect_error<ShapeError>([&] { F::attention_core(q2, q2, q2, 2, true, probs); }, {"attention_core", q2.str()});
  F::attention_core(q, q, q, 2, true, probs);
  expect_error<ShapeError>([&] { F::attention_core_backward(q, q, q, q, probs, 3); },
                           {"attention_core_backward", "probs"});
}

// ---------------------------------------------------------------- MultiHeadAttention

TEST(MultiHeadAttention, ChildrenAndForwardMatchNaiveReference) {
  const std::int64_t B = 2, S = 4, D = 6, H = 3;
  for (bool causal : {true, false}) {
    nn::MultiHeadAttention mha(D, H, causal, DType::f64);
    EXPECT_EQ(parameter_names(mha), (std::vector<std::string>{"q.weight", "k.weight", "v.weight", "o.weight"}));
    EXPECT_EQ(mha.head_dim(), 2);
    EXPECT_FALSE(linear_at(mha, "q").has_bias());
    fill_parameters(mha, 41);
    Tensor x = random_tensor({B, S, D}, DType::f64, 42);
    Tensor y = mha.forward(x);
    ASSERT_EQ(y.shape(), (Shape{B, S, D}));
    EXPECT_EQ(mha.local_heads(), H);
    const Mat xs = to_doubles(x);
    auto proj = [&](const char* name) { return naive_linear(xs, to_doubles(linear_at(mha, name).weight.value), B * S, D, D); };
    const Mat ctx = naive_attention(proj("q"), proj("k"), proj("v"), B, S, H, D / H, causal);
    expect_close(to_doubles(y), naive_linear(ctx, to_doubles(linear_at(mha, "o").weight.value), B * S, D, D), 1e-13,
                 "MultiHeadAttention forward");
  }
}

TEST(MultiHeadAttention, CausalOutputIgnoresLaterPositions) {
  const std::int64_t B = 1, S = 5, D = 4;
  nn::MultiHeadAttention mha(D, 2, true, DType::f64);
  fill_parameters(mha, 51);
  Tensor x = random_tensor({B, S, D}, DType::f64, 52);
  const Mat before = to_doubles(mha.forward(x));
  double* xs = x.data<double>();
  for (std::int64_t d = 0; d < D; ++d) xs[(S - 1) * D + d] += 3.0;  // change only the last token
  const Mat after = to_doubles(mha.forward(x));
  for (std::int64_t i = 0; i < (S - 1) * D; ++i) EXPECT_EQ(after[i], before[i]) << "flat index " << i;
  bool last_changed = false;
  for (std::int64_t i = (S - 1) * D; i < S * D; ++i) last_changed |= after[i] != before[i];
  EXPECT_TRUE(last_changed);
}

TEST(MultiHeadAttention, BackwardMatchesFiniteDifferences) {
  for (bool causal : {true, false}) {
    nn::MultiHeadAttention mha(6, 2, causal, DType::f64);
    fill_parameters(mha, 61);
    check_gradients(mha, random_tensor({2, 4, 6}, DType::f64, 62), 63);
    check_accumulation(mha, random_tensor({2, 4, 6}, DType::f64, 64), 65);
  }
}

TEST(MultiHeadAttention, Float32TracksFloat64) {
  nn::MultiHeadAttention m64(8, 2, true, DType::f64), m32(8, 2, true, DType::f32);
  fill_parameters(m64, 71);
  copy_parameters(m64, m32);
  const Mat x = random_values(2 * 3 * 8, 72);
  expect_close(to_doubles(m32.forward(make_tensor(x, {2, 3, 8}, DType::f32))),
               to_doubles(m64.forward(make_tensor(x, {2, 3, 8}, DType::f64))), 1e-5, "f32 attention");
}

TEST(MultiHeadAttention, ReplacedChildTakesEffect) {
  nn::MultiHeadAttention mha(4, 2, true, DType::f64);
  fill_parameters(mha, 81);
  Tensor x = random_tensor({1, 3, 4}, DType::f64, 82);
  const Mat before = to_doubles(mha.forward(x));
  auto fresh = std::make_unique<nn::Linear>(4, 4, false, DType::f64);
  assign(fresh->weight.value, random_values(16, 83));
  nn::Linear* fresh_ptr = fresh.get();
  std::unique_ptr<nn::Module> old = mha.replace("q", std::move(fresh));
  EXPECT_EQ(&mha.at("q"), fresh_ptr);
  const Mat after = to_doubles(mha.forward(x));
  EXPECT_NE(after, before);
  // Backward reaches the new child too: its gradient is filled, the old one's is not.
  mha.zero_grad();
  mha.backward(random_tensor({1, 3, 4}, DType::f64, 84));
  EXPECT_GT(dot(to_doubles(fresh_ptr->weight.grad), to_doubles(fresh_ptr->weight.grad)), 0.0);
  for (double g : to_doubles(dynamic_cast<nn::Linear&>(*old).weight.grad)) EXPECT_EQ(g, 0.0);
}

// Exactly what tensor parallelism does to attention: each rank keeps q/k/v rows and o
// columns of its heads, runs attention on n_heads / tp heads, and the row-parallel o
// sums the partial outputs. Output, dx and every weight gradient of the shards must
// reassemble to the full layer's.
TEST(MultiHeadAttention, RunsOnTheHeadsItsNarrowedChildrenProduce) {
  const std::int64_t B = 2, S = 4, D = 8, H = 4, parts = 2;
  nn::MultiHeadAttention full(D, H, true, DType::f64);
  fill_parameters(full, 91);
  Tensor x = random_tensor({B, S, D}, DType::f64, 92);
  Tensor dy = random_tensor({B, S, D}, DType::f64, 93);
  full.zero_grad();
  const Mat y_full = to_doubles(full.forward(x));
  const Mat dx_full = to_doubles(full.backward(dy));

  Mat y_sum(y_full.size(), 0.0), dx_sum(dx_full.size(), 0.0);
  for (std::int64_t part = 0; part < parts; ++part) {
    nn::MultiHeadAttention shard(D, H, true, DType::f64);
    shard_attention(full, shard, part, parts);
    const Mat y = to_doubles(shard.forward(x));
    EXPECT_EQ(shard.local_heads(), H / parts);
    if (part == 0) {
      // The first half of the heads, by the naive formula.
      const Mat xs = to_doubles(x);
      auto proj = [&](const char* name) {
        return naive_linear(xs, to_doubles(linear_at(shard, name).weight.value), B * S, D, D / parts);
      };
      const Mat ctx = naive_attention(proj("q"), proj("k"), proj("v"), B, S, H / parts, D / H, true);
      expect_close(y, naive_linear(ctx, to_doubles(linear_at(shard, "o").weight.value), B * S, D / parts, D), 1e-13,
                   "first-half heads");
    }
    const Mat dx = to_doubles(shard.backward(dy));
    for (std::size_t i = 0; i < y.size(); ++i) y_sum[i] += y[i];
    for (std::size_t i = 0; i < dx.size(); ++i) dx_sum[i] += dx[i];
    const std::int64_t w = D / parts, off = part * w;
    for (const char* name : {"q", "k", "v"}) {
      expect_close(to_doubles(linear_at(shard, name).weight.grad),
                   block(to_doubles(linear_at(full, name).weight.grad), D, off, w, 0, D), 1e-12,
                   std::string("shard grad of ") + name);
    }
    expect_close(to_doubles(linear_at(shard, "o").weight.grad),
                 block(to_doubles(linear_at(full, "o").weight.grad), D, 0, D, off, w), 1e-12, "shard grad of o");
  }
  expect_close(y_sum, y_full, 1e-12, "sum of head-shard outputs");
  expect_close(dx_sum, dx_full, 1e-12, "sum of head-shard input gradients");
}

TEST(MultiHeadAttention, Errors) {
  expect_error<InvalidArgument>([] { nn::MultiHeadAttention(6, 4); }, {"MultiHeadAttention(d_model=6, n_heads=4"});
  nn::MultiHeadAttention mha(8, 2, true, DType::f64);
  // A q narrowed to a width that is not whole heads is a shape error naming the layer.
  mha.replace("q", std::make_unique<nn::Linear>(8, 6, false, DType::f64));
  expect_error<ShapeError>([&] { mha.forward(Tensor::zeros({1, 2, 8}, DType::f64)); },
                           {"MultiHeadAttention(d_model=8, n_heads=2", "f64[1, 2, 6]", "head_dim 4"});
  nn::MultiHeadAttention fresh(8, 2, true, DType::f64);
  expect_error<InvalidArgument>([&] { fresh.backward(Tensor::zeros({1, 2, 8}, DType::f64)); },
                                {"MultiHeadAttention", "without a preceding forward"});
}

// ---------------------------------------------------------------- SwiGLU

TEST(SwiGLU, ForwardMatchesFormula) {
  nn::SwiGLU mlp(4, 6, DType::f64);
  EXPECT_EQ(parameter_names(mlp), (std::vector<std::string>{"gate.weight", "up.weight", "down.weight"}));
  fill_parameters(mlp, 101);
  Tensor x = random_tensor({2, 3, 4}, DType::f64, 102);
  const Mat xs = to_doubles(x);
  const Mat g = naive_linear(xs, to_doubles(linear_at(mlp, "gate").weight.value), 6, 4, 6);
  const Mat u = naive_linear(xs, to_doubles(linear_at(mlp, "up").weight.value), 6, 4, 6);
  Mat h(g.size());
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  expect_close(to_doubles(mlp.forward(x)), naive_linear(h, to_doubles(linear_at(mlp, "down").weight.value), 6, 6, 4),
               1e-13, "SwiGLU forward");
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  nn::SwiGLU mlp(4, 6, DType::f64);
  fill_parameters(mlp, 111, 1.0);
  check_gradients(mlp, random_tensor({2, 3, 4}, DType::f64, 112, 2.0), 113);
  check_accumulation(mlp, random_tensor({2, 3, 4}, DType::f64, 114), 115);
}

TEST(SwiGLU, RunsOnTheHiddenWidthItsNarrowedChildrenProduce) {
  const std::int64_t D = 4, H = 6, parts = 2;
  nn::SwiGLU full(D, H, DType::f64);
  fill_parameters(full, 121);
  Tensor x = random_tensor({2, 3, D}, DType::f64, 122);
  Tensor dy = random_tensor({2, 3, D}, DType::f64, 123);
  full.zero_grad();
  const Mat y_full = to_doubles(full.forward(x));
  const Mat dx_full = to_doubles(full.backward(dy));
  Mat y_sum(y_full.size(), 0.0), dx_sum(dx_full.size(), 0.0);
  for (std::int64_t part = 0; part < parts; ++part) {
    nn::SwiGLU shard(D, H, DType::f64);
    shard_swiglu(full, shard, part, parts);
    const Mat y = to_doubles(shard.forward(x));
    const Mat dx = to_doubles(shard.backward(dy));
    for (std::size_t i = 0; i < y.size(); ++i) y_sum[i] += y[i];
    for (std::size_t i = 0; i < dx.size(); ++i) dx_sum[i] += dx[i];
    const std::int64_t w = H / parts, off = part * w;
    for (const char* name : {"gate", "up"}) {
      expect_close(to_doubles(linear_at(shard, name).weight.grad),
                   block(to_doubles(linear_at(full, name).weight.grad), D, off, w, 0, D), 1e-12,
                   std::string("shard grad of ") + name);
    }
    expect_close(to_doubles(linear_at(shard, "down").weight.grad),
                 block(to_doubles(linear_at(full, "down").weight.grad), H, 0, D, off, w), 1e-12, "shard grad of down");
  }
  expect_close(y_sum, y_full, 1e-12, "sum of hidden-shard outputs");
  expect_close(dx_sum, dx_full, 1e-12, "sum of hidden-shard input gradients");
}

TEST(SwiGLU, Errors) {
  nn::SwiGLU mlp(4, 6, DType::f64);
  mlp.replace("up", std::make_unique<nn::Linear>(4, 5, false, DType::f64));
  expect_error<ShapeError>([&] { mlp.forward(Tensor::zeros({2, 4}, DType::f64)); },
                           {"SwiGLU(d_model=4, hidden=6)", "f64[2, 6]", "f64[2, 5]"});
  expect_error<ShapeError>([] { F::swiglu(Tensor::zeros({2}, DType::f64), Tensor::zeros({3}, DType::f64)); },
                           {"swiglu", "f64[3]"});
}

// ---------------------------------------------------------------- TransformerBlock, Decoder

TEST(TransformerBlock, NamesAndBackwardMatchesFiniteDifferences) {
  models::TransformerBlock blockm(4, 2, 6, 1e-6, DType::f64);
  EXPECT_EQ(parameter_names(blockm),
            (std::vector<std::string>{"attn_norm.weight", "attn.q.weight", "attn.k.weight", "attn.v.weight",
                                      "attn.o.weight", "mlp_norm.weight", "mlp.gate.weight", "mlp.up.weight",
                                      "mlp.down.weight"}));
  fill_parameters(blockm, 131, 0.8);
  check_gradients(blockm, random_tensor({2, 3, 4}, DType::f64, 132), 133);
  check_accumulation(blockm, random_tensor({2, 3, 4}, DType::f64, 134), 135);
}

TEST(TransformerBlock, ForwardIsTheTwoResiduals) {
  models::TransformerBlock blockm(4, 2, 6, 1e-6, DType::f64);
  fill_parameters(blockm, 141, 0.8);
  Tensor x = random_tensor({1, 3, 4}, DType::f64, 142);
  const Mat y = to_doubles(blockm.forward(x));
  // The same composition through the children, by hand.
  Tensor a = blockm.at("attn").forward(blockm.at("attn_norm").forward(x));
  Mat h = to_doubles(x);
  const Mat av = to_doubles(a);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += av[i];
  Tensor ht = make_tensor(h, x.shape(), DType::f64);
  const Mat m = to_doubles(blockm.at("mlp").forward(blockm.at("mlp_norm").forward(ht)));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += m[i];
  EXPECT_EQ(y, h);
}

namespace {
models::DecoderConfig tiny_config() { return {/*vocab=*/7, /*d_model=*/4, /*n_heads=*/2, /*hidden=*/6, /*n_layers=*/2, 1e-6}; }
Tensor tiny_ids() { return Tensor::from_vector(std::vector<std::int64_t>{3, 0, 6, 2, 2, 5, 1, 4}, {2, 4}); }
}  // namespace

TEST(Decoder, ParameterNamesInStableOrder) {
  models::Decoder dec(tiny_config());
  std::vector<std::string> expected{"embed.weight"};
  for (const char* layer : {"layers.0.", "layers.1."}) {
    for (const char* p : {"attn_norm.weight", "attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight",
                          "mlp_norm.weight", "mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"}) {
      expected.push_back(std::string(layer) + p);
    }
  }
  expected.push_back("norm.weight");
  expected.push_back("head.weight");
  EXPECT_EQ(parameter_names(dec), expected);
  EXPECT_EQ(parameter_names(dec), parameter_names(dec));  // stable across calls
  EXPECT_EQ(dec.at("layers.1").type_name(), "TransformerBlock");
  EXPECT_EQ(dec.at("layers.0.attn").type_name(), "MultiHeadAttention");
  EXPECT_EQ(dec.at("layers.0.mlp").type_name(), "SwiGLU");
  EXPECT_EQ(dec.at("head").type_name(), "Linear");
  EXPECT_EQ(linear_at(dec, "head").out_features(), 7);
  EXPECT_EQ(dec.named_parameters("model").back().first, "model.head.weight");
}

// parameter_count() (used to refuse a model that cannot fit before it is built) is the
// model's real count, with and without tied embeddings; an uncountable size is a
// ConfigError, not a wrapped number.
TEST(Decoder, ParameterCountIsTheBuiltModels) {
  for (bool tied : {false, true}) {
    models::DecoderConfig c = tiny_config();
    c.tie_embeddings = tied;
    models::Decoder dec(c);
    std::int64_t built = 0;
    for (const auto& [name, p] : dec.named_parameters()) built += p->value.numel();
    EXPECT_EQ(c.parameter_count(), built) << "tie_embeddings " << tied;
  }
  models::DecoderConfig huge = tiny_config();
  huge.d_model = std::int64_t{1} << 40;
  huge.hidden = std::int64_t{1} << 40;
  EXPECT_THROW((void)huge.parameter_count(), ConfigError);
}

TEST(Decoder, ForwardShapesAndBackwardMatchesFiniteDifferences) {
  models::Decoder dec(tiny_config(), DType::f64);
  fill_parameters(dec, 151, 0.8);
  Tensor ids = tiny_ids();
  Tensor logits = dec.forward(ids);
  EXPECT_EQ(logits.shape(), (Shape{2, 4, 7}));
  EXPECT_FALSE(dec.backward(random_tensor({2, 4, 7}, DType::f64, 152)).defined());
  check_gradients(dec, ids, 153, /*check_input=*/false);
}

// The activation estimate of a pipeline stage: the stages of any split add up to the
// whole decoder's; a checkpointed stage keeps its blocks' inputs plus one block whole.
TEST(Decoder, StageActivationEstimatesAddUp) {
  models::DecoderConfig c = tiny_config();
  c.n_layers = 4;
  const std::int64_t seq = 5;
  const std::int64_t whole = models::decoder_activation_bytes(c, seq, 1, false);
  for (std::int64_t cut = 0; cut <= c.n_layers; ++cut) {
    const std::int64_t front = models::decoder_activation_bytes(c, seq, 1, false, {}, {true, 0, cut, false, false});
    const std::int64_t back = models::decoder_activation_bytes(c, seq, 1, false, {}, {false, cut, -1, true, true});
    EXPECT_EQ(front + back, whole) << "cut before layers." << cut;
  }
  const std::int64_t block = models::decoder_activation_bytes(c, seq, 1, false, {}, {false, 1, 1, false, false});
  EXPECT_EQ(block * c.n_layers + models::decoder_activation_bytes(c, seq, 1, false, {}, {true, 0, 0, true, true}),
            whole);
  // Every block checkpointed, layers.2 .. layers.3: two inputs (d_model floats per token)
  // less one, plus one block recomputed whole.
  const std::int64_t ckpt = models::decoder_activation_bytes(c, seq, 1, false, nn::CheckpointPolicy{1},
                                                            {false, 2, 2, false, false});
  EXPECT_EQ(ckpt, block + seq * c.d_model * static_cast<std::int64_t>(sizeof(float)));
}

TEST(Decoder, IsCausal) {
  models::Decoder dec(tiny_config(), DType::f64);
  fill_parameters(dec, 161, 0.8);
  const Mat a = to_doubles(dec.forward(Tensor::from_vector(std::vector<std::int64_t>{3, 0, 6, 2}, {1, 4})));
  const Mat b = to_doubles(dec.forward(Tensor::from_vector(std::vector<std::int64_t>{3, 0, 6, 5}, {1, 4})));
  for (std::size_t i = 0; i < 3 * 7; ++i) EXPECT_EQ(a[i], b[i]);
  EXPECT_NE(a, b);
}

TEST(Decoder, ReplacingANestedProjectionTakesEffect) {
  models::Decoder dec(tiny_config(), DType::f64);
  fill_parameters(dec, 171, 0.8);
  const Mat before = to_doubles(dec.forward(tiny_ids()));
  auto fresh = std::make_unique<nn::Linear>(4, 4, false, DType::f64);
  assign(fresh->weight.value, random_values(16, 172));
  dec.replace("layers.1.attn.q", std::move(fresh));
  EXPECT_NE(to_doubles(dec.forward(tiny_ids())), before);
}

TEST(Decoder, Errors) {
  models::DecoderConfig bad = tiny_config();
  bad.n_heads = 3;
  expect_error<InvalidArgument>([&] { models::Decoder d(bad); }, {"Decoder(vocab=7, d_model=4, n_heads=3"});
  models::Decoder dec(tiny_config());
  Tensor f = Tensor::zeros({2, 4}, DType::f32);
  expect_error<ShapeError>([&] { dec.forward(f); }, {"Decoder(", f.str(), "i64 [B, S]"});
  expect_error<InvalidArgument>([&] { models::TransformerBlock b(4, 3, 6); }, {"TransformerBlock(d_model=4, n_heads=3"});
}

// ---------------------------------------------------------------- channel MLP

TEST(ChannelMlp, BlockStructureAndOptIn) {
  models::ChannelMlpBlock b(3, 5, DType::f64);
  EXPECT_EQ(parameter_names(b),
            (std::vector<std::string>{"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}));
  EXPECT_EQ(b.at("mlp.0").type_name(), "Conv2d");
  EXPECT_EQ(b.at("mlp.1").type_name(), "GELU");
  EXPECT_EQ(dynamic_cast<nn::Conv2d&>(b.at("mlp.2")).in_channels(), 5);
  auto paths = b.tensor_parallel_paths();
  ASSERT_TRUE(paths.has_value());
  EXPECT_EQ(paths->column, "mlp.0");
  EXPECT_EQ(paths->row, "mlp.2");
  // The declared paths resolve in the tree.
  EXPECT_EQ(b.find(paths->column), &b.at("mlp.0"));
  EXPECT_EQ(b.find(paths->row), &b.at("mlp.2"));

  models::ChannelMlpModel model(3, 5, 2);
  EXPECT_FALSE(model.tensor_parallel_paths().has_value());
  const auto names = parameter_names(model);
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(names.front(), "blocks.0.mlp.0.weight");
  EXPECT_EQ(names.back(), "blocks.1.mlp.2.bias");
  EXPECT_TRUE(model.at("blocks.1").tensor_parallel_paths().has_value());
}

TEST(ChannelMlp, ForwardIsResidualPlusMlp) {
  models::ChannelMlpBlock b(3, 5, DType::f64);
  fill_parameters(b, 181);
  Tensor x = random_tensor({2, 3, 2, 3}, DType::f64, 182);
  const Mat y = to_doubles(b.forward(x));
  Mat expected = to_doubles(x);
  const Mat m = to_doubles(b.at("mlp").forward(x));
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += m[i];
  EXPECT_EQ(y, expected);
}

TEST(ChannelMlp, BackwardMatchesFiniteDifferences) {
  models::ChannelMlpBlock b(3, 5, DType::f64);
  fill_parameters(b, 191);
  check_gradients(b, random_tensor({2, 3, 2, 3}, DType::f64, 192), 193);
  check_accumulation(b, random_tensor({2, 3, 2, 3}, DType::f64, 194), 195);
  models::ChannelMlpModel model(3, 4, 2, DType::f64);
  fill_parameters(model, 196);
  check_gradients(model, random_tensor({1, 3, 2, 2}, DType::f64, 197), 198);
}

TEST(ChannelMlp, ReplacedConvTakesEffect) {
  models::ChannelMlpModel model(3, 4, 1, DType::f64);
  fill_parameters(model, 201);
  Tensor x = random_tensor({1, 3, 2, 2}, DType::f64, 202);
  const Mat before = to_doubles(model.forward(x));
  auto fresh = std::make_unique<nn::Conv2d>(4, 3, 1, 1, nn::Conv2dOptions{}, true, DType::f64);
  assign(fresh->weight.value, random_values(12, 203));
  model.replace("blocks.0.mlp.2", std::move(fresh));
  EXPECT_NE(to_doubles(model.forward(x)), before);
}
