// Initialisation and training of tensor-parallel models against their serial twins:
// initialised master weights are bit-identical at tp = 1, 2, 4, and a column -> GELU ->
// row MLP trained with AdamW tracks the serial run step by step.

#include <gtest/gtest.h>

#include "tessera/nn/activation.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

constexpr std::uint64_t kSeed = 20261122;

class TpTraining : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

// Exact (bitwise) equality of two float tensors.
::testing::AssertionResult bit_identical(const Tensor& a, const Tensor& b) { return tensors_close(a, b, 0.0); }

}  // namespace

TEST_F(TpTraining, InitialisedMasterWeightsAreBitIdenticalAtEveryTpSize) {
  // Serial twins, initialised under the FQNs the parallel layers will have.
  nn::Linear up(6, 8), down(8, 6);
  nn::Conv2d conv_up(4, 8, 1, 1), conv_down(8, 4, 1, 1);
  nn::Embedding table(8, 4);
  nn::initialize_parameters(up, kSeed, "mlp.up");
  nn::initialize_parameters(down, kSeed, "mlp.down");
  nn::initialize_parameters(conv_up, kSeed, "block.up");
  nn::initialize_parameters(conv_down, kSeed, "block.down");
  nn::initialize_parameters(table, kSeed, "tok");

  tp::ColumnParallelLinear col(6, 8, tp);
  tp::RowParallelLinear row(8, 6, tp);
  tp::ColumnParallelConv2d ccol(4, 8, tp);
  tp::RowParallelConv2d crow(8, 4, tp);
  tp::ParallelEmbedding by_dim(8, 4, tp);
  tp::VocabParallelEmbedding by_vocab(8, 4, tp);
  nn::initialize_parameters(col, kSeed, "mlp.up");
  nn::initialize_parameters(row, kSeed, "mlp.down");
  nn::initialize_parameters(ccol, kSeed, "block.up");
  nn::initialize_parameters(crow, kSeed, "block.down");
  nn::initialize_parameters(by_dim, kSeed, "tok");
  nn::initialize_parameters(by_vocab, kSeed, "tok");

  EXPECT_TRUE(bit_identical(col.master_weight(), up.weight.value));
  EXPECT_TRUE(bit_identical(col.master_bias(), up.bias.value));
  EXPECT_TRUE(bit_identical(row.master_weight(), down.weight.value));
  EXPECT_TRUE(bit_identical(row.master_bias(), down.bias.value));
  EXPECT_TRUE(bit_identical(ccol.master_weight(), conv_up.weight.value));
  EXPECT_TRUE(bit_identical(ccol.master_bias(), conv_up.bias.value));
  EXPECT_TRUE(bit_identical(crow.master_weight(), conv_down.weight.value));
  EXPECT_TRUE(bit_identical(crow.master_bias(), conv_down.bias.value));
  EXPECT_TRUE(bit_identical(by_dim.master_weight(), table.weight.value));
  EXPECT_TRUE(bit_identical(by_vocab.master_weight(), table.weight.value));
  // Not all zeros: the init actually ran.
  EXPECT_NE(ops::dot(up.weight.value, up.weight.value), 0.0);
}

TEST_F(TpTraining, MlpTrainedWithAdamWTracksSerial) {
  const std::int64_t in = 8, hidden = 16, batch = 6;
  nn::Sequential serial;
  serial.append(std::make_unique<nn::Linear>(in, hidden));
  serial.append(std::make_unique<nn::GELU>());
  serial.append(std::make_unique<nn::Linear>(hidden, in));
  nn::Sequential parallel;
  parallel.append(std::make_unique<tp::ColumnParallelLinear>(in, hidden, tp, /*gather_output=*/false));
  parallel.append(std::make_unique<nn::GELU>());
  parallel.append(std::make_unique<tp::RowParallelLinear>(hidden, in, tp, /*input_is_parallel=*/true));
  nn::initialize_parameters(serial, kSeed, "mlp");
  nn::initialize_parameters(parallel, kSeed, "mlp");

  AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 1e-2;
  AdamW serial_opt(serial.named_parameters("mlp"), options);
  AdamW parallel_opt(parallel.named_parameters("mlp"), options);

  // Regress a fixed target: loss = 0.5 * mean((y - target)^2).
  const Tensor x = random_tensor({batch, in}, 61);
  const Tensor target = random_tensor({batch, in}, 62);
  auto loss_and_grad = [&](const Tensor& y, Tensor& dy) {
    dy = y.clone();
    ops::axpy(-1.0, target, dy);
    const double loss = 0.5 * ops::dot(dy, dy) / static_cast<double>(dy.numel());
    ops::scale(dy, 1.0 / static_cast<double>(dy.numel()));
    return loss;
  };

  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 10; ++step) {
    serial_opt.zero_grad();
    parallel_opt.zero_grad();
    Tensor dy_serial, dy_parallel;
    const double serial_loss = loss_and_grad(serial.forward(x), dy_serial);
    const double parallel_loss = loss_and_grad(parallel.forward(x), dy_parallel);
    EXPECT_NEAR(parallel_loss, serial_loss, 1e-5 * serial_loss) << "step " << step;
    serial.backward(dy_serial);
    parallel.backward(dy_parallel);
    serial_opt.step();
    parallel_opt.step();
    if (step == 0) first_loss = serial_loss;
    last_loss = serial_loss;

    const auto want = serial.named_parameters("mlp");
    const auto got = parallel.named_parameters("mlp");
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(tensors_close(tp::assemble_master(*got[i].second, got[i].second->value, tp), want[i].second->value))
          << got[i].first << " after step " << step;
    }
  }
  EXPECT_LT(last_loss, first_loss);  // it trained
}
