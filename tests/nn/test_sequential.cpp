// Sequential: child naming and FQNs, forward = chained children, backward through the
// whole chain against finite differences, and errors.

#include <gtest/gtest.h>

#include "nn_test_util.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"

using namespace tessera;
using namespace tessera::nn_test;
namespace F = tessera::nn::functional;

namespace {

std::unique_ptr<nn::Sequential> make_mlp(DType dtype) {
  auto seq = std::make_unique<nn::Sequential>();
  seq->append(std::make_unique<nn::Linear>(4, 6, true, dtype));
  seq->append(std::make_unique<nn::GELU>());
  seq->append(std::make_unique<nn::Linear>(6, 3, false, dtype));
  seq->append(std::make_unique<nn::LayerNorm>(3, 1e-5, true, dtype));
  seq->append(std::make_unique<nn::SiLU>());
  return seq;
}

}  // namespace

TEST(Sequential, NamesChildrenAndParametersInStableOrder) {
  auto seq = make_mlp(DType::f32);
  EXPECT_EQ(seq->type_name(), "Sequential");
  ASSERT_EQ(seq->size(), 5u);
  EXPECT_EQ((*seq)[0].type_name(), "Linear");
  EXPECT_EQ((*seq)[1].type_name(), "GELU");
  EXPECT_EQ((*seq)[3].type_name(), "LayerNorm");
  EXPECT_EQ(seq->child("2"), &(*seq)[2]);
  std::vector<std::string> names;
  for (auto& [name, p] : seq->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "3.weight", "3.bias"}));
  names.clear();
  for (auto& [name, p] : seq->named_parameters("model.mlp")) names.push_back(name);
  EXPECT_EQ(names.front(), "model.mlp.0.weight");
  EXPECT_EQ(names.back(), "model.mlp.3.bias");
  // append returns the typed child.
  nn::Linear& head = seq->append(std::make_unique<nn::Linear>(3, 2));
  EXPECT_EQ(head.out_features(), 2);
  EXPECT_EQ(seq->named_parameters().back().first, "5.bias");
}

TEST(Sequential, ForwardChainsTheChildren) {
  auto seq = make_mlp(DType::f64);
  fill_parameters(*seq, 801);
  Tensor x = random_tensor({5, 4}, DType::f64, 802);
  Tensor y = seq->forward(x);
  // The same chain by hand through the functional API.
  auto& l0 = static_cast<nn::Linear&>((*seq)[0]);
  auto& l2 = static_cast<nn::Linear&>((*seq)[2]);
  auto& ln = static_cast<nn::LayerNorm&>((*seq)[3]);
  Tensor mean, rstd;
  Tensor h = F::linear(x, l0.weight.value, l0.bias.value);
  h = F::gelu(h);
  h = F::linear(h, l2.weight.value, Tensor());
  h = F::layer_norm(h, ln.weight.value, ln.bias.value, 1e-5, mean, rstd);
  h = F::silu(h);
  EXPECT_EQ(to_doubles(y), to_doubles(h));  // same operations in the same order: bit-identical
}

TEST(Sequential, BackwardMatchesFiniteDifferences) {
  auto seq = make_mlp(DType::f64);
  fill_parameters(*seq, 811);
  check_gradients(*seq, random_tensor({3, 4}, DType::f64, 812), 813);
  check_accumulation(*seq, random_tensor({3, 4}, DType::f64, 814), 815);
}

TEST(Sequential, EmbeddingFirstGivesNoInputGradient) {
  nn::Sequential seq;
  seq.append(std::make_unique<nn::Embedding>(9, 4, DType::f64));
  seq.append(std::make_unique<nn::RMSNorm>(4, 1e-6, DType::f64));
  seq.append(std::make_unique<nn::Linear>(4, 2, true, DType::f64));
  fill_parameters(seq, 821);
  Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{8, 0, 3, 8}, {2, 2});
  check_gradients(seq, ids, 822, /*check_input=*/false);
  seq.forward(ids);
  EXPECT_FALSE(seq.backward(random_tensor({2, 2, 2}, DType::f64, 823)).defined());
}

TEST(Sequential, Errors) {
  nn::Sequential seq;
  seq.append(std::make_unique<nn::Linear>(4, 3));
  expect_error<InvalidArgument>([&] { (void)seq[1]; }, {"Sequential", "index 1", "1 children"});
  expect_error<InvalidArgument>([&] { seq.append(std::unique_ptr<nn::Module>()); }, {"Sequential", "child 1"});
  // A child's error names the child layer.
  Tensor bad = Tensor::zeros({2, 5}, DType::f32);
  expect_error<ShapeError>([&] { seq.forward(bad); }, {"Linear(in_features=4", bad.str()});
  // An empty Sequential is the identity.
  nn::Sequential empty;
  Tensor x = random_tensor({2, 2}, DType::f64, 831);
  EXPECT_EQ(to_doubles(empty.forward(x)), to_doubles(x));
}
