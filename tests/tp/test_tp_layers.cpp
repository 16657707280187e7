// Every tensor-parallel layer against its serial twin at tp = 1, 2, 4: forward output,
// input gradient and the reassembled weight and bias gradients, on the same master
// weights and inputs (fp32, relative 1e-5).

#include <gtest/gtest.h>

#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::fill_random;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

class TpLayers : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

// The reassembled gradient of a (possibly sharded) parameter.
Tensor master_grad(const Parameter& p, Communicator& tp) { return tp::assemble_master(p, p.grad, tp); }

}  // namespace

TEST_F(TpLayers, ColumnParallelLinearMatchesSerial) {
  for (bool gather_output : {true, false}) {
    nn::Linear serial(6, 8);
    fill_random(serial.weight, 1);
    fill_random(serial.bias, 2);
    auto parallel = tp::ColumnParallelLinear::from_serial(serial, tp, gather_output, "mlp.up");
    EXPECT_EQ(parallel->weight.placement.tp, Placement::shard(0));
    EXPECT_EQ(parallel->bias.placement.tp, Placement::shard(0));

    const Tensor x = random_tensor({2, 3, 6}, 3);
    const Tensor dy = random_tensor({2, 3, 8}, 4);
    const Tensor y_serial = serial.forward(x);
    const Tensor dx_serial = serial.backward(dy);

    const Tensor y = parallel->forward(x);
    const Tensor dx = parallel->backward(gather_output ? dy : tp::split_along(dy, -1, tp));
    EXPECT_TRUE(tensors_close(y, gather_output ? y_serial : tp::split_along(y_serial, -1, tp))) << gather_output;
    EXPECT_TRUE(tensors_close(dx, dx_serial)) << gather_output;
    EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad));
    EXPECT_TRUE(tensors_close(master_grad(parallel->bias, tp), serial.bias.grad));
    EXPECT_TRUE(tensors_close(parallel->master_weight(), serial.weight.value, 0));
    EXPECT_TRUE(tensors_close(parallel->master_bias(), serial.bias.value, 0));
  }
}

TEST_F(TpLayers, RowParallelLinearMatchesSerial) {
  for (bool input_is_parallel : {false, true}) {
    nn::Linear serial(8, 5);
    fill_random(serial.weight, 11);
    fill_random(serial.bias, 12);
    auto parallel = tp::RowParallelLinear::from_serial(serial, tp, input_is_parallel, "mlp.down");
    EXPECT_EQ(parallel->weight.placement.tp, Placement::shard(1));
    EXPECT_TRUE(parallel->bias.placement.is_replicated());

    const Tensor x = random_tensor({4, 8}, 13);
    const Tensor dy = random_tensor({4, 5}, 14);
    const Tensor y_serial = serial.forward(x);
    const Tensor dx_serial = serial.backward(dy);

    const Tensor y = parallel->forward(input_is_parallel ? tp::split_along(x, -1, tp) : x);
    const Tensor dx = parallel->backward(dy);
    EXPECT_TRUE(tensors_close(y, y_serial)) << input_is_parallel;
    EXPECT_TRUE(tensors_close(dx, input_is_parallel ? tp::split_along(dx_serial, -1, tp) : dx_serial));
    EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad));
    // The replicated bias: every rank holds the full gradient, counted once.
    EXPECT_TRUE(tensors_close(parallel->bias.grad, serial.bias.grad));
  }
}

TEST_F(TpLayers, ConvolutionsMatchSerial1x1) {
  nn::Conv2d up_serial(4, 8, 1, 1);
  nn::Conv2d down_serial(8, 6, 1, 1);
  fill_random(up_serial.weight, 21);
  fill_random(up_serial.bias, 22);
  fill_random(down_serial.weight, 23);
  fill_random(down_serial.bias, 24);
  auto up = tp::ColumnParallelConv2d::from_serial(up_serial, tp, false, "blocks.0.up");
  auto down = tp::RowParallelConv2d::from_serial(down_serial, tp, true, "blocks.0.down");

  const Tensor x = random_tensor({2, 4, 3, 5}, 25);
  const Tensor dy = random_tensor({2, 6, 3, 5}, 26);
  const Tensor y_serial = down_serial.forward(up_serial.forward(x));
  const Tensor dx_serial = up_serial.backward(down_serial.backward(dy));
  const Tensor hidden = up->forward(x);
  EXPECT_EQ(hidden.shape(), (Shape{2, 8 / tp.size(), 3, 5}));
  const Tensor y = down->forward(hidden);
  const Tensor dx = up->backward(down->backward(dy));
  EXPECT_TRUE(tensors_close(y, y_serial));
  EXPECT_TRUE(tensors_close(dx, dx_serial));
  EXPECT_TRUE(tensors_close(master_grad(up->weight, tp), up_serial.weight.grad));
  EXPECT_TRUE(tensors_close(master_grad(up->bias, tp), up_serial.bias.grad));
  EXPECT_TRUE(tensors_close(master_grad(down->weight, tp), down_serial.weight.grad));
  EXPECT_TRUE(tensors_close(down->bias.grad, down_serial.bias.grad));

  // Gathered column output and split row input.
  auto up_gathered = tp::ColumnParallelConv2d::from_serial(up_serial, tp, true);
  auto down_splitting = tp::RowParallelConv2d::from_serial(down_serial, tp, false);
  EXPECT_TRUE(tensors_close(down_splitting->forward(up_gathered->forward(x)), y_serial));
}

// The 1x1-only limit is gone (k x k convs shard over channels the same way;
// test_tp_conv compares every geometry with its serial twin): both conversions accept a
// 3x3 and a strided conv and keep their weights' spatial extents.
TEST_F(TpLayers, KxKAndStridedConvolutionsAreAccepted) {
  nn::Conv2d k3(4, 8, 3, 3);
  nn::functional::Conv2dOptions strided;
  strided.stride_h = 2;
  nn::Conv2d s2(4, 8, 1, 1, strided);
  for (const nn::Conv2d* conv : {&k3, &s2}) {
    auto col = tp::ColumnParallelConv2d::from_serial(*conv, tp, false, "encoder.stem");
    auto row = tp::RowParallelConv2d::from_serial(*conv, tp, true, "encoder.stem");
    EXPECT_EQ(col->weight.global_shape, conv->weight.value.shape());
    EXPECT_EQ(row->weight.global_shape, conv->weight.value.shape());
  }
}

TEST_F(TpLayers, EmbeddingsMatchSerial) {
  nn::Embedding serial(8, 4 * 2);
  fill_random(serial.weight, 31);
  const Tensor ids = Tensor::from_vector<std::int64_t>({0, 7, 3, 3, 5, 1}, {2, 3});
  const Tensor dy = random_tensor({2, 3, 8}, 32);
  const Tensor y_serial = serial.forward(ids);
  serial.backward(dy);

  auto by_dim = tp::ParallelEmbedding::from_serial(serial, tp, "tok");
  EXPECT_EQ(by_dim->weight.placement.tp, Placement::shard(1));
  EXPECT_TRUE(tensors_close(by_dim->forward(ids), y_serial));
  EXPECT_FALSE(by_dim->backward(dy).defined());
  EXPECT_TRUE(tensors_close(master_grad(by_dim->weight, tp), serial.weight.grad));

  auto by_vocab = tp::VocabParallelEmbedding::from_serial(serial, tp, "tok");
  EXPECT_EQ(by_vocab->weight.placement.tp, Placement::shard(0));
  EXPECT_EQ(by_vocab->first_row(), 8 / tp.size() * tp.rank());
  EXPECT_TRUE(tensors_close(by_vocab->forward(ids), y_serial));
  by_vocab->backward(dy);
  EXPECT_TRUE(tensors_close(master_grad(by_vocab->weight, tp), serial.weight.grad));
  EXPECT_THROW(by_vocab->forward(Tensor::from_vector<std::int64_t>({8}, {1})), InvalidArgument);
}

TEST_F(TpLayers, ToSerialRoundTrips) {
  nn::Linear serial(4, 8);
  fill_random(serial.weight, 41);
  fill_random(serial.bias, 42);
  auto column = tp::ColumnParallelLinear::from_serial(serial, tp);
  auto back = column->to_serial();
  EXPECT_TRUE(tensors_close(back->weight.value, serial.weight.value, 0));
  EXPECT_TRUE(tensors_close(back->bias.value, serial.bias.value, 0));
  auto row = tp::RowParallelLinear::from_serial(serial, tp);
  EXPECT_TRUE(tensors_close(row->to_serial()->weight.value, serial.weight.value, 0));
  // The replicated row bias comes back as it is; every twin shares one to_serial.
  EXPECT_TRUE(tensors_close(row->to_serial()->bias.value, serial.bias.value, 0));
  nn::Embedding table(8, 4);
  fill_random(table.weight, 43);
  EXPECT_TRUE(tensors_close(tp::VocabParallelEmbedding::from_serial(table, tp)->to_serial()->weight.value,
                            table.weight.value, 0));
  EXPECT_TRUE(tensors_close(tp::ParallelEmbedding::from_serial(table, tp)->to_serial()->weight.value,
                            table.weight.value, 0));
}

TEST_F(TpLayers, IndivisibleShardedDimNamesLayerDimAndTpSize) {
  if (tp.size() == 1) GTEST_SKIP() << "every extent covers 1 rank";
  // Uneven extents are sharded (test_tp_uneven); one smaller than the tp size is refused.
  const std::int64_t odd = tp.size() - 1;
  tp::ParallelLinearOptions options;
  options.name = "layers.3.proj";
  try {
    tp::ColumnParallelLinear layer(4, odd, tp, true, options);
    FAIL();
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ColumnParallelLinear 'layers.3.proj'"), std::string::npos) << what;
    EXPECT_NE(what.find("dim 0 (extent " + std::to_string(odd) + ")"), std::string::npos) << what;
    EXPECT_NE(what.find("tp size " + std::to_string(tp.size())), std::string::npos) << what;
  }
  EXPECT_THROW(tp::RowParallelLinear(odd, 4, tp), ShapeError);
  EXPECT_THROW(tp::ParallelEmbedding(10, odd, tp), ShapeError);
  EXPECT_THROW(tp::VocabParallelEmbedding(odd, 4, tp), ShapeError);
}

// ml.models.parallel's example: ParallelEmbedding -> ColumnParallelLinear(gather_output
// = false) -> RowParallelLinear(input_is_parallel = true) equals the serial Sequential.
TEST_F(TpLayers, TwoLayerExampleEqualsSerialSequential) {
  const std::int64_t vocab = 11, in_features = 8, out_features = 12;
  nn::Sequential serial;
  auto& embedding = static_cast<nn::Embedding&>(serial.append(std::make_unique<nn::Embedding>(vocab, in_features)));
  auto& first = static_cast<nn::Linear&>(serial.append(std::make_unique<nn::Linear>(in_features, out_features)));
  auto& second = static_cast<nn::Linear&>(serial.append(std::make_unique<nn::Linear>(out_features, out_features)));
  fill_random(embedding.weight, 51);
  fill_random(first.weight, 52);
  fill_random(first.bias, 53);
  fill_random(second.weight, 54);
  fill_random(second.bias, 55);

  nn::Sequential parallel;
  parallel.append(tp::ParallelEmbedding::from_serial(embedding, tp, "0"));
  parallel.append(tp::ColumnParallelLinear::from_serial(first, tp, /*gather_output=*/false, "1"));
  parallel.append(tp::RowParallelLinear::from_serial(second, tp, /*input_is_parallel=*/true, "2"));

  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 4, 9, 0, 10, 4}, {2, 3});
  const Tensor dy = random_tensor({2, 3, out_features}, 56);
  EXPECT_TRUE(tensors_close(parallel.forward(ids), serial.forward(ids)));
  parallel.backward(dy);
  serial.backward(dy);
  const auto want = serial.named_parameters();
  const auto got = parallel.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);  // same FQNs: checkpoints and plans agree
    EXPECT_TRUE(tensors_close(master_grad(*got[i].second, tp), want[i].second->grad)) << got[i].first;
  }
}
