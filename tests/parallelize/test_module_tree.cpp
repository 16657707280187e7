// Module tree: FQNs with Sequential indices, lookup and in-place replacement by path.

#include <gtest/gtest.h>

#include "tessera/nn/activation.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;

namespace {

// model = Sequential{ 0: Linear(4, 8), 1: GELU, 2: Sequential{ 0: LayerNorm(8), 1: Linear(8, 2) } }
std::unique_ptr<nn::Sequential> small_model() {
  auto model = std::make_unique<nn::Sequential>();
  model->append(std::make_unique<nn::Linear>(4, 8));
  model->append(std::make_unique<nn::GELU>());
  auto inner = std::make_unique<nn::Sequential>();
  inner->append(std::make_unique<nn::LayerNorm>(8));
  inner->append(std::make_unique<nn::Linear>(8, 2));
  model->append(std::move(inner));
  return model;
}

}  // namespace

TEST(ModuleTree, NamesAndOrder) {
  auto model = small_model();
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters("net")) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"net.0.weight", "net.0.bias", "net.2.0.weight", "net.2.0.bias",
                                             "net.2.1.weight", "net.2.1.bias"}));
  std::vector<std::string> modules;
  for (auto& [name, m] : model->named_modules()) modules.push_back(name + ":" + m->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Sequential", "0:Linear", "1:GELU", "2:Sequential", "2.0:LayerNorm",
                                               "2.1:Linear"}));
}

TEST(ModuleTree, FindAtAndReplace) {
  auto model = small_model();
  EXPECT_EQ(model->find(""), model.get());
  EXPECT_EQ(model->find("2.1")->type_name(), "Linear");
  EXPECT_EQ(model->find("2.7"), nullptr);
  EXPECT_EQ(model->find("1.0"), nullptr);
  try {
    model->at("2.5.weight");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no module at path '2.5.weight'"), std::string::npos) << what;
    EXPECT_NE(what.find("Sequential '2' has no child '5' (children: 0, 1)"), std::string::npos) << what;
  }
  auto old = model->replace("2.1", std::make_unique<nn::Linear>(8, 3));
  EXPECT_EQ(old->type_name(), "Linear");
  EXPECT_EQ(static_cast<nn::Linear&>(model->at("2.1")).out_features(), 3);
  // The replacement's parameters appear under the same FQNs.
  EXPECT_EQ(model->named_parameters().back().first, "2.1.bias");
  EXPECT_EQ(model->named_parameters().back().second->value.numel(), 3);
  EXPECT_THROW(model->replace("", std::make_unique<nn::GELU>()), InvalidArgument);
  EXPECT_THROW(model->replace("3", std::make_unique<nn::GELU>()), InvalidArgument);
  EXPECT_THROW(model->replace("0", nullptr), InvalidArgument);
}

TEST(ModuleTree, PatternsMatchPerComponent) {
  using tp::fqn_matches;
  EXPECT_TRUE(fqn_matches("layers.*.attn.q", "layers.3.attn.q"));
  EXPECT_TRUE(fqn_matches("layers.1.mlp", "layers.1.mlp"));
  EXPECT_FALSE(fqn_matches("layers.*.attn.q", "layers.3.attn.k"));
  EXPECT_FALSE(fqn_matches("layers.*", "layers.3.attn"));  // * stays within one component
  EXPECT_TRUE(fqn_matches("layers.*.mlp.*", "layers.0.mlp.gate"));
  EXPECT_TRUE(fqn_matches("*_norm", "attn_norm"));
  EXPECT_TRUE(fqn_matches("blocks.1*", "blocks.12"));
  EXPECT_FALSE(fqn_matches("blocks.1*", "blocks.21"));
  EXPECT_TRUE(fqn_matches("", ""));
  EXPECT_FALSE(fqn_matches("*", ""));  // the root only by ""
  EXPECT_FALSE(fqn_matches("", "layers"));
}
