// A current decoder's attention, serially: rotary position embeddings against their
// formula (and the backward as the exact inverse and adjoint), the grouped-query
// attention core against multi-head attention on repeated key/value heads (forward and
// backward), every gradient of a GQA + RoPE attention and decoder against central finite
// differences (f64), parameter shapes and counts, the errors that name the option at
// fault, which key/value heads a tensor-parallel rank reads, and that the defaults are
// the plain decoder.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../nn/nn_test_util.hpp"
#include "models/kv_heads_projection.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/linear.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

using Mat = std::vector<double>;

// Rotary embeddings by the formula, interleaved pairs: (x0 + i x1) e^{i s theta^(-2p/hd)}.
Mat naive_rope(const Mat& x, std::int64_t B, std::int64_t S, std::int64_t W, std::int64_t hd, double theta) {
  Mat y(x.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t c = 0; c < W; c += 2) {
        const std::int64_t pair = (c % hd) / 2;
        const double angle = static_cast<double>(s) / std::pow(theta, 2.0 * static_cast<double>(pair) / hd);
        const std::size_t e = static_cast<std::size_t>((b * S + s) * W + c);
        y[e] = x[e] * std::cos(angle) - x[e + 1] * std::sin(angle);
        y[e + 1] = x[e] * std::sin(angle) + x[e + 1] * std::cos(angle);
      }
  return y;
}

// k [B, S, kv * hd] with each key/value head repeated `group` times in place:
// [B, S, kv * group * hd] (Llama's repeat_kv).
Tensor repeat_heads(const Tensor& k, std::int64_t hd, std::int64_t group) {
  const std::int64_t B = k.size(0), S = k.size(1), kv = k.size(2) / hd;
  const Mat in = to_doubles(k);
  Mat out;
  for (std::int64_t r = 0; r < B * S; ++r)
    for (std::int64_t h = 0; h < kv * group; ++h)
      for (std::int64_t d = 0; d < hd; ++d) {
        out.push_back(in[static_cast<std::size_t>(r * kv * hd + (h / group) * hd + d)]);
      }
  return make_tensor(out, {B, S, kv * group * hd}, k.dtype());
}

// The gradient of repeat_heads: the group's blocks summed.
Mat sum_repeated(const Tensor& g, std::int64_t hd, std::int64_t group) {
  const std::int64_t rows = g.size(0) * g.size(1), heads = g.size(2) / hd;
  const Mat in = to_doubles(g);
  Mat out(static_cast<std::size_t>(rows * heads / group * hd), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t d = 0; d < hd; ++d)
        out[static_cast<std::size_t>((r * heads / group + h / group) * hd + d)] +=
            in[static_cast<std::size_t>((r * heads + h) * hd + d)];
  return out;
}

models::DecoderConfig gqa_config(std::int64_t n_kv_heads, bool rope) {
  models::DecoderConfig c;
  c.vocab = 7;
  c.d_model = 8;
  c.n_heads = 4;
  c.hidden = 6;
  c.n_layers = 2;
  c.n_kv_heads = n_kv_heads;
  c.rope = rope;
  c.rope_theta = 50.0;  // small: noticeable angles at short sequences
  return c;
}

}  // namespace

// ---------------------------------------------------------------- rotary embeddings

TEST(Rope, MatchesTheFormulaInF64AndF32) {
  const std::int64_t B = 2, S = 5, hd = 4, W = 3 * hd;
  for (double theta : {10000.0, 7.5}) {
    Tensor x = random_tensor({B, S, W}, DType::f64, 301, 2.0);
    const Mat want = naive_rope(to_doubles(x), B, S, W, hd, theta);
    expect_close(to_doubles(F::rope(x, hd, theta)), want, 1e-14, "rope f64");
    Tensor x32 = make_tensor(to_doubles(x), {B, S, W}, DType::f32);
    expect_close(to_doubles(F::rope(x32, hd, theta)), naive_rope(to_doubles(x32), B, S, W, hd, theta), 1e-6,
                 "rope f32");
  }
  // Position 0 is not rotated; later positions are.
  Tensor x = random_tensor({1, 3, hd}, DType::f64, 302);
  const Mat in = to_doubles(x), out = to_doubles(F::rope(x, hd, 10000.0));
  for (std::int64_t c = 0; c < hd; ++c) EXPECT_EQ(out[static_cast<std::size_t>(c)], in[static_cast<std::size_t>(c)]);
  EXPECT_NE(out[static_cast<std::size_t>(hd)], in[static_cast<std::size_t>(hd)]);
}

TEST(Rope, BackwardIsTheInverseAndTheAdjoint) {
  const std::int64_t B = 2, S = 6, hd = 6, W = 2 * hd;
  Tensor x = random_tensor({B, S, W}, DType::f64, 311);
  Tensor y = random_tensor({B, S, W}, DType::f64, 312);
  expect_close(to_doubles(F::rope_backward(F::rope(x, hd, 100.0), hd, 100.0)), to_doubles(x), 1e-14,
               "rope_backward(rope(x))");
  // <rope(x), y> = <x, rope_backward(y)>: the backward is the adjoint.
  const double lhs = dot(to_doubles(F::rope(x, hd, 100.0)), to_doubles(y));
  const double rhs = dot(to_doubles(x), to_doubles(F::rope_backward(y, hd, 100.0)));
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
}

TEST(Rope, ScoresDependOnlyOnRelativePositions) {
  // q at position i and k at position j: <rope(q)_i, rope(k)_j> depends on i - j only.
  const std::int64_t hd = 4;
  Tensor qv = random_tensor({1, 1, hd}, DType::f64, 321), kv = random_tensor({1, 1, hd}, DType::f64, 322);
  auto at_positions = [&](std::int64_t i, std::int64_t j) {
    const std::int64_t S = std::max(i, j) + 1;
    Mat q(static_cast<std::size_t>(S * hd), 0.0), k(q.size(), 0.0);
    const Mat q0 = to_doubles(qv), k0 = to_doubles(kv);
    for (std::int64_t d = 0; d < hd; ++d) {
      q[static_cast<std::size_t>(i * hd + d)] = q0[static_cast<std::size_t>(d)];
      k[static_cast<std::size_t>(j * hd + d)] = k0[static_cast<std::size_t>(d)];
    }
    const Mat rq = to_doubles(F::rope(make_tensor(q, {1, S, hd}, DType::f64), hd, 10.0));
    const Mat rk = to_doubles(F::rope(make_tensor(k, {1, S, hd}, DType::f64), hd, 10.0));
    double s = 0;
    for (std::int64_t d = 0; d < hd; ++d) {
      s += rq[static_cast<std::size_t>(i * hd + d)] * rk[static_cast<std::size_t>(j * hd + d)];
    }
    return s;
  };
  EXPECT_NEAR(at_positions(3, 1), at_positions(7, 5), 1e-12);
  EXPECT_NEAR(at_positions(0, 2), at_positions(4, 6), 1e-12);
  EXPECT_GT(std::abs(at_positions(3, 1) - at_positions(3, 2)), 1e-6);
}

TEST(Rope, RejectsOddHeadDimAndBadTheta) {
  Tensor x = random_tensor({1, 2, 6}, DType::f64, 331);
  expect_error<ShapeError>([&] { (void)F::rope(x, 3, 10000.0); }, {"rope", "head_dim 3"});
  expect_error<InvalidArgument>([&] { (void)F::rope(x, 2, 0.0); }, {"rope", "theta"});
}

// ---------------------------------------------------------------- grouped-query core

TEST(GroupedQueryAttention, CoreEqualsMultiHeadOnRepeatedHeads) {
  const std::int64_t B = 2, S = 5, heads = 6, hd = 2;
  for (std::int64_t kv : {1, 2, 3, 6}) {
    for (bool causal : {true, false}) {
      const std::int64_t group = heads / kv;
      Tensor q = random_tensor({B, S, heads * hd}, DType::f64, 341, 2.0);
      Tensor k = random_tensor({B, S, kv * hd}, DType::f64, 342, 2.0);
      Tensor v = random_tensor({B, S, kv * hd}, DType::f64, 343);
      Tensor kr = repeat_heads(k, hd, group), vr = repeat_heads(v, hd, group);
      Tensor probs, probs_r;
      const Tensor out = F::attention_core(q, k, v, heads, causal, probs);
      const Tensor out_r = F::attention_core(q, kr, vr, heads, causal, probs_r);
      const std::string what = "kv " + std::to_string(kv) + (causal ? " causal" : "");
      expect_close(to_doubles(out), to_doubles(out_r), 1e-14, what + " context");
      expect_close(to_doubles(probs), to_doubles(probs_r), 1e-14, what + " probs");
      Tensor g = random_tensor({B, S, heads * hd}, DType::f64, 344);
      const F::AttentionGrads got = F::attention_core_backward(g, q, k, v, probs, heads);
      const F::AttentionGrads rep = F::attention_core_backward(g, q, kr, vr, probs_r, heads);
      ASSERT_EQ(got.k.shape(), k.shape());
      ASSERT_EQ(got.v.shape(), v.shape());
      expect_close(to_doubles(got.q), to_doubles(rep.q), 1e-13, what + " dq");
      expect_close(to_doubles(got.k), sum_repeated(rep.k, hd, group), 1e-13, what + " dk");
      expect_close(to_doubles(got.v), sum_repeated(rep.v, hd, group), 1e-13, what + " dv");
    }
  }
}

TEST(GroupedQueryAttention, CoreRejectsKvHeadsThatDoNotDivide) {
  Tensor q = random_tensor({1, 3, 8}, DType::f64, 351);
  Tensor k = random_tensor({1, 3, 6}, DType::f64, 352);  // 3 heads of 2 for 4 query heads
  Tensor probs;
  expect_error<ShapeError>([&] { (void)F::attention_core(q, k, k, 4, true, probs); }, {"kv_heads", "k and v"});
}

// ---------------------------------------------------------------- the module and decoder

TEST(GroupedQueryAttention, ModuleShapesAndFiniteDifferences) {
  for (std::int64_t kv : {1, 2}) {
    for (bool rope : {false, true}) {
      nn::AttentionOptions o;
      o.n_kv_heads = kv;
      o.rope = rope;
      o.rope_theta = 20.0;
      nn::MultiHeadAttention mha(8, 4, o, DType::f64);
      EXPECT_EQ(mha.n_kv_heads(), kv);
      EXPECT_EQ(mha.at("k").named_parameters()[0].second->value.shape(), (Shape{kv * 2, 8}));
      EXPECT_EQ(mha.at("v").named_parameters()[0].second->value.shape(), (Shape{kv * 2, 8}));
      EXPECT_EQ(mha.at("q").named_parameters()[0].second->value.shape(), (Shape{8, 8}));
      fill_parameters(mha, 361);
      check_gradients(mha, random_tensor({2, 4, 8}, DType::f64, 362), 363);
      check_accumulation(mha, random_tensor({2, 4, 8}, DType::f64, 364), 365);
    }
  }
}

TEST(GroupedQueryAttention, RopeChangesTheOutputAndKeepsCausality) {
  nn::AttentionOptions o;
  o.n_kv_heads = 2;
  nn::MultiHeadAttention plain(8, 4, o, DType::f64);
  o.rope = true;
  nn::MultiHeadAttention rotary(8, 4, o, DType::f64);
  fill_parameters(plain, 371);
  fill_parameters(rotary, 371);
  Tensor x = random_tensor({1, 5, 8}, DType::f64, 372);
  const Mat a = to_doubles(plain.forward(x)), b = to_doubles(rotary.forward(x));
  // Position 0 attends to itself only, where the rotation cancels in q.k: the same
  // output; later positions differ.
  for (std::size_t d = 0; d < 8; ++d) EXPECT_NEAR(a[d], b[d], 1e-14);
  double diff = 0;
  for (std::size_t i = 8; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-6);
  // Changing the last token leaves every earlier output unchanged.
  double* xs = x.data<double>();
  for (std::int64_t d = 0; d < 8; ++d) xs[4 * 8 + d] += 2.0;
  const Mat c = to_doubles(rotary.forward(x));
  for (std::size_t i = 0; i < 4 * 8; ++i) EXPECT_EQ(c[i], b[i]) << i;
}

TEST(GqaDecoder, ParameterCountAndFiniteDifferences) {
  for (std::int64_t kv : {1, 2, 4}) {
    const models::DecoderConfig c = gqa_config(kv, /*rope=*/true);
    models::Decoder dec(c, DType::f64);
    std::int64_t built = 0;
    for (const auto& [name, p] : dec.named_parameters()) built += p->value.numel();
    EXPECT_EQ(c.parameter_count(), built) << "n_kv_heads " << kv;
    EXPECT_EQ(dec.at("layers.1.attn.k").named_parameters()[0].second->value.shape(), (Shape{kv * 2, 8}));
  }
  models::Decoder dec(gqa_config(2, true), DType::f64);
  fill_parameters(dec, 381, 0.8);
  check_gradients(dec, Tensor::from_vector(std::vector<std::int64_t>{3, 0, 6, 2, 5, 1, 1, 4}, {2, 4}), 382,
                  /*check_input=*/false);
}

TEST(GqaDecoder, DefaultsAreThePlainDecoder) {
  models::DecoderConfig plain = gqa_config(0, false);
  models::DecoderConfig explicit_mha = gqa_config(4, false);
  EXPECT_EQ(plain.kv_heads(), 4);
  const models::DecoderConfig fresh;
  EXPECT_EQ(fresh.n_kv_heads, 0);
  EXPECT_FALSE(fresh.rope);
  EXPECT_EQ(fresh.rope_theta, 10000.0);
  models::Decoder a(plain, DType::f64), b(explicit_mha, DType::f64);
  EXPECT_EQ(a.describe(), "Decoder(vocab=7, d_model=8, n_heads=4, hidden=6, n_layers=2)");
  EXPECT_EQ(b.describe(), a.describe());
  EXPECT_EQ(dynamic_cast<nn::MultiHeadAttention&>(a.at("layers.0.attn")).describe(),
            "MultiHeadAttention(d_model=8, n_heads=4, causal=true)");
  fill_parameters(a, 391, 0.8);
  copy_parameters(a, b);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(to_doubles(a.forward(ids)), to_doubles(b.forward(ids)));
  models::Decoder g(gqa_config(2, true));
  EXPECT_EQ(g.describe(), "Decoder(vocab=7, d_model=8, n_heads=4, hidden=6, n_layers=2, n_kv_heads=2, rope_theta=50)");
}

TEST(GqaDecoder, ErrorsNameTheOption) {
  expect_error<InvalidArgument>([] { models::Decoder d(gqa_config(3, false)); }, {"n_kv_heads (3)", "n_heads (4)"});
  expect_error<InvalidArgument>([] { models::Decoder d(gqa_config(-1, false)); }, {"n_kv_heads"});
  models::DecoderConfig odd = gqa_config(0, true);
  odd.d_model = 12;  // head_dim 3
  expect_error<InvalidArgument>([&] { models::Decoder d(odd); }, {"rope", "even"});
  models::DecoderConfig bad_theta = gqa_config(0, true);
  bad_theta.rope_theta = -1;
  expect_error<InvalidArgument>([&] { models::Decoder d(bad_theta); }, {"rope_theta"});
  nn::AttentionOptions o;
  o.n_kv_heads = 3;
  expect_error<InvalidArgument>([&] { nn::MultiHeadAttention m(8, 4, o); }, {"n_kv_heads (3)", "divide"});
}

// ---------------------------------------------------------------- tp: which heads a rank reads

TEST(KvHeadsOfRank, EveryQueryHeadReadsItsKeyValueHead) {
  // (n_heads, n_kv_heads, tp): repeated (kv divides tp), split-like, and neither.
  const std::int64_t cases[][3] = {{4, 1, 2}, {4, 1, 4}, {4, 2, 4}, {8, 2, 4}, {6, 3, 2}, {12, 3, 4}, {4, 2, 2}};
  for (const auto& c : cases) {
    const std::int64_t H = c[0], kv = c[1];
    const int tp = static_cast<int>(c[2]);
    for (int r = 0; r < tp; ++r) {
      const auto mine = models::detail::kv_heads_of_rank(H, kv, tp, r);
      const std::int64_t n = H / tp;
      ASSERT_EQ(n % mine.local_group, 0);
      ASSERT_EQ(static_cast<std::int64_t>(mine.heads.size()), n / mine.local_group);
      for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(mine.heads[static_cast<std::size_t>(i / mine.local_group)], (r * n + i) / (H / kv))
            << "H " << H << " kv " << kv << " tp " << tp << " rank " << r << " local head " << i;
      }
    }
  }
  // One key/value head per rank when n_kv_heads divides tp.
  EXPECT_EQ(models::detail::kv_heads_of_rank(8, 2, 4, 3).heads, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(models::detail::kv_heads_of_rank(6, 3, 2, 1).heads, (std::vector<std::int64_t>{1, 2, 2}));
}
