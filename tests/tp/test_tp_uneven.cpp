// Uneven tensor-parallel shards (issue 24 item 6) at tp = world size (1, 2, 4), with
// extents 5, 7 and 11 that divide by neither 2 nor 4: every rank holds the partition
// rule's block (shard_range: the first extent % tp ranks one row more), and
//   - the mappings split, gather (given the extent, or exchanging it) and reduce-scatter
//     such blocks exactly; a gather of blocks that break the rule, and sequence
//     parallelism over an uneven sequence, are refused with the dim named;
//   - every layer type (column / row linear, both embeddings, column / row k x k conv)
//     equals its serial twin forward and backward: output, input gradient and the
//     reassembled weight and bias gradients (fp32, relative 1e-5);
//   - a GPT-2 vocabulary of 50257 runs through VocabParallelEmbedding, a column-parallel
//     head and vocab_parallel_cross_entropy, against a serial reference computed here;
//   - a checkpoint of such a model written at tp = world size loads at tp 1 and tp 2
//     with every block byte for byte the serial master's.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "expect_error.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::expect_error;
using tessera::testing::fill_random;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

class TpUneven : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

Tensor master_grad(const Parameter& p, Communicator& tp) { return tp::assemble_master(p, p.grad, tp); }

Tensor scaled(const Tensor& x, float factor) {
  std::vector<float> v = x.contiguous().to_vector<float>();
  for (float& e : v) e *= factor;
  return Tensor::from_vector(v, x.shape());
}

Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Shape& shape) {
  return Tensor::from_vector<std::int64_t>(ids, shape);
}


// A serial cross-entropy (mean over the rows whose target is not `ignore`): loss and
// d loss / d logits, in double, of the f32 logits [n, v].
struct SerialCe {
  double loss = 0;
  Tensor grad;  // f32 [n, v]
};

SerialCe serial_cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& t, std::int64_t ignore) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::vector<float> x = logits.contiguous().to_vector<float>();
  std::vector<float> grad(x.size(), 0.0f);
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < n; ++i) counted += t[i] != ignore;
  SerialCe s;
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    double m = -1e300, z = 0;
    for (std::int64_t j = 0; j < v; ++j) m = std::max(m, static_cast<double>(x[i * v + j]));
    for (std::int64_t j = 0; j < v; ++j) z += std::exp(x[i * v + j] - m);
    s.loss += (std::log(z) + m - x[i * v + t[i]]) / counted;
    for (std::int64_t j = 0; j < v; ++j) {
      grad[i * v + j] = static_cast<float>((std::exp(x[i * v + j] - m) / z - (j == t[i] ? 1.0 : 0.0)) / counted);
    }
  }
  s.grad = Tensor::from_vector(grad, logits.shape());
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// The partition and the mappings
// ---------------------------------------------------------------------------

TEST_F(TpUneven, ShardedParameterTakesThePartitionRulesBlock) {
  for (std::int64_t extent : {5, 7, 11}) {
    for (int dim : {0, 1}) {
      Shape shape = {3, 4};
      shape[dim] = extent;
      const Parameter p = tp::make_tp_sharded("layer", "weight", shape, dim, tp, DType::f32, Device::host(), {});
      const ShardRange range = shard_range(extent, tp.size(), tp.rank());
      EXPECT_EQ(p.value.size(dim), range.length);
      EXPECT_EQ(p.local_offset[dim], range.start);
      EXPECT_EQ(p.global_shape, shape);
      // The first extent % tp ranks hold one more row.
      EXPECT_EQ(range.length, extent / tp.size() + (tp.rank() < extent % tp.size() ? 1 : 0));
    }
  }
}

TEST_F(TpUneven, ExtentBelowTheTpSizeIsRefusedWithTheDim) {
  if (tp.size() == 1) GTEST_SKIP() << "no extent >= 1 is below 1 rank";
  expect_error<ShapeError>(
      [&] { tp::make_tp_sharded("ColumnParallelLinear 'head'", "weight", {1, 4}, 0, tp, DType::f32, Device::host(), {}); },
      {"ColumnParallelLinear 'head'", "weight", "dim 0 (extent 1)", "tp size " + std::to_string(tp.size())});
}

TEST_F(TpUneven, SplitGatherAndReduceScatterFollowThePartitionRule) {
  const int p = tp.size();
  for (std::int64_t extent : {5, 7, 11}) {
    for (int d : {0, 1, 2}) {
      Shape shape = {3, 2, 4};
      shape[d] = extent;
      const std::string what = "extent " + std::to_string(extent) + " dim " + std::to_string(d);
      const Tensor x = random_tensor(shape, 100 + extent * 3 + d);
      const ShardRange range = shard_range(extent, p, tp.rank());
      const Tensor block = x.narrow(d, range.start, range.length).contiguous();

      const Tensor local = tp::split_along(x, d, tp);
      EXPECT_TRUE(tensors_close(local, block, 0)) << what;
      EXPECT_TRUE(tensors_close(tp::gather_along(local, d, tp, extent), x, 0)) << what;
      EXPECT_TRUE(tensors_close(tp::gather_along(local, d, tp, tp::GatherExtent::exchanged()), x, 0)) << what;
      // Negative dims count from the end.
      EXPECT_TRUE(tensors_close(tp::gather_along(local, d - 3, tp, extent), x, 0)) << what;

      // Rank r contributes (r + 1) * x: the sum is p (p + 1) / 2 * x, this rank gets its block.
      const Tensor reduced = tp::reduce_scatter_along(scaled(x, static_cast<float>(tp.rank() + 1)), d, tp);
      EXPECT_TRUE(tensors_close(reduced, scaled(block, static_cast<float>(p * (p + 1) / 2)), 1e-6)) << what;

      // The mapping pairs: scatter forward = split, backward = gather (and the reverse).
      tp::Mapping scatter(tp::Mapping::Kind::scatter, tp, d);
      tp::Mapping gather(tp::Mapping::Kind::gather, tp, d);
      EXPECT_TRUE(tensors_close(scatter.forward(x), block, 0)) << what;
      EXPECT_TRUE(tensors_close(scatter.backward(local), x, 0)) << what;
      EXPECT_TRUE(tensors_close(gather.forward(local), x, 0)) << what;
      EXPECT_TRUE(tensors_close(gather.backward(x), block, 0)) << what;
    }
  }
}

TEST_F(TpUneven, GatherOfBlocksThatBreakTheRuleIsRefusedEverywhere) {
  if (tp.size() == 1) GTEST_SKIP() << "one rank's block is the whole";
  // Rank 0 holds 1 row and the others 2: the rule gives the narrow block to the last rank.
  const Tensor local = random_tensor({tp.rank() == 0 ? 1 : 2, 3}, 7);
  expect_error<ShapeError>([&] { tp::gather_along(local, 0, tp, tp::GatherExtent::exchanged()); },
                           {"dim 0", "partition rule"});
  // Given an extent, a block of the wrong size is named with its rank.
  const Tensor wrong = random_tensor({5, 3}, 8);  // never a block of 5 at tp >= 2
  expect_error<ShapeError>([&] { tp::gather_along(wrong, 0, tp, 5); },
                           {"rank " + std::to_string(tp.rank()), "dim 0", "extent 5"});
}

TEST_F(TpUneven, UnevenSequenceIsRefusedNamingTheDim) {
  if (tp.size() == 1) GTEST_SKIP() << "every sequence divides by 1";
  const std::int64_t s = tp.size() + 1;
  const Tensor x = random_tensor({2, s, 4}, 9);
  const std::vector<std::string> parts = {"dim 1", "extent " + std::to_string(s),
                                          "tp group size " + std::to_string(tp.size()), "sequence"};
  expect_error<ShapeError>([&] { tp::sequence_reduce_scatter(x, 1, tp); }, parts);
  expect_error<ShapeError>([&] { tp::sequence_all_gather_backward(x, 1, tp); }, parts);
  expect_error<ShapeError>([&] { tp::sequence_all_gather(tp::split_along(x, 1, tp), 1, tp, s); }, parts);
  // A sequence-parallel row layer (whose output is reduce-scattered along the sequence).
  tp::ParallelLinearOptions o;
  o.sequence_dim = 1;
  tp::RowParallelLinear row(4, 3, tp, false, o);
  expect_error<ShapeError>([&] { row.forward(x); }, parts);
}

// ---------------------------------------------------------------------------
// Layers against their serial twins
// ---------------------------------------------------------------------------

TEST_F(TpUneven, ColumnParallelLinearWithUnevenOutFeatures) {
  for (std::int64_t out : {5, 7, 11}) {
    for (bool gather_output : {true, false}) {
      const std::string what = "out " + std::to_string(out) + (gather_output ? " gathered" : " sharded");
      nn::Linear serial(6, out);
      fill_random(serial.weight, 1);
      fill_random(serial.bias, 2);
      auto parallel = tp::ColumnParallelLinear::from_serial(serial, tp, gather_output, "mlp.up");
      EXPECT_EQ(parallel->weight.value.size(0), shard_range(out, tp.size(), tp.rank()).length);

      const Tensor x = random_tensor({2, 3, 6}, 3);
      const Tensor dy = random_tensor({2, 3, out}, 4);
      const Tensor y_serial = serial.forward(x);
      const Tensor dx_serial = serial.backward(dy);
      const Tensor y = parallel->forward(x);
      const Tensor dx = parallel->backward(gather_output ? dy : tp::split_along(dy, -1, tp));
      EXPECT_TRUE(tensors_close(y, gather_output ? y_serial : tp::split_along(y_serial, -1, tp))) << what;
      EXPECT_TRUE(tensors_close(dx, dx_serial)) << what;
      EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad)) << what;
      EXPECT_TRUE(tensors_close(master_grad(parallel->bias, tp), serial.bias.grad)) << what;
      EXPECT_TRUE(tensors_close(parallel->to_serial()->weight.value, serial.weight.value, 0)) << what;
    }
  }
}

TEST_F(TpUneven, RowParallelLinearWithUnevenInFeatures) {
  for (std::int64_t in : {5, 7, 11}) {
    for (bool input_is_parallel : {false, true}) {
      const std::string what = "in " + std::to_string(in) + (input_is_parallel ? " given sharded" : " split here");
      nn::Linear serial(in, 4);
      fill_random(serial.weight, 5);
      fill_random(serial.bias, 6);
      auto parallel = tp::RowParallelLinear::from_serial(serial, tp, input_is_parallel, "mlp.down");
      EXPECT_EQ(parallel->weight.value.size(1), shard_range(in, tp.size(), tp.rank()).length);

      const Tensor x = random_tensor({2, 3, in}, 7);
      const Tensor dy = random_tensor({2, 3, 4}, 8);
      const Tensor y_serial = serial.forward(x);
      const Tensor dx_serial = serial.backward(dy);
      const Tensor y = parallel->forward(input_is_parallel ? tp::split_along(x, -1, tp) : x);
      const Tensor dx = parallel->backward(dy);
      EXPECT_TRUE(tensors_close(y, y_serial)) << what;
      EXPECT_TRUE(tensors_close(dx, input_is_parallel ? tp::split_along(dx_serial, -1, tp) : dx_serial)) << what;
      EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad)) << what;
      EXPECT_TRUE(tensors_close(parallel->bias.grad, serial.bias.grad)) << what;
    }
  }
}

// The Megatron MLP: column (gather_output off) -> row (input_is_parallel) over a hidden
// width of 7, uneven at tp 2 and 4.
TEST_F(TpUneven, ColumnThenRowOverAnUnevenHiddenWidth) {
  nn::Linear up(6, 7), down(7, 5);
  fill_random(up.weight, 11);
  fill_random(up.bias, 12);
  fill_random(down.weight, 13);
  fill_random(down.bias, 14);
  auto col = tp::ColumnParallelLinear::from_serial(up, tp, false, "up");
  auto row = tp::RowParallelLinear::from_serial(down, tp, true, "down");
  const Tensor x = random_tensor({4, 6}, 15);
  const Tensor dy = random_tensor({4, 5}, 16);
  const Tensor y_serial = down.forward(up.forward(x));
  const Tensor dx_serial = up.backward(down.backward(dy));
  EXPECT_TRUE(tensors_close(row->forward(col->forward(x)), y_serial));
  EXPECT_TRUE(tensors_close(col->backward(row->backward(dy)), dx_serial));
  EXPECT_TRUE(tensors_close(master_grad(col->weight, tp), up.weight.grad));
  EXPECT_TRUE(tensors_close(master_grad(col->bias, tp), up.bias.grad));
  EXPECT_TRUE(tensors_close(master_grad(row->weight, tp), down.weight.grad));
  EXPECT_TRUE(tensors_close(row->bias.grad, down.bias.grad));
}

TEST_F(TpUneven, StridedLinearStillNeedsAnEvenSplitAndSaysSo) {
  if (tp.size() == 1) GTEST_SKIP() << "every extent divides by 1";
  tp::ParallelLinearOptions o;
  o.stride = 3;
  o.name = "attn.qkv";
  expect_error<ShapeError>([&] { tp::ColumnParallelLinear(4, 3 * (2 * tp.size() + 1), tp, true, o); },
                           {"attn.qkv", "stride 3", "stride 1 only"});
}

TEST_F(TpUneven, ParallelEmbeddingWithAnUnevenEmbeddingDim) {
  for (std::int64_t dim : {5, 7, 11}) {
    nn::Embedding serial(9, dim);
    fill_random(serial.weight, 21);
    auto parallel = tp::ParallelEmbedding::from_serial(serial, tp, "embed");
    EXPECT_EQ(parallel->weight.value.size(1), shard_range(dim, tp.size(), tp.rank()).length);
    const Tensor ids = ids_tensor({0, 3, 8, 3, 5, 1}, {2, 3});
    const Tensor dy = random_tensor({2, 3, dim}, 22);
    const Tensor y_serial = serial.forward(ids);
    serial.backward(dy);
    EXPECT_TRUE(tensors_close(parallel->forward(ids), y_serial, 0)) << dim;
    parallel->backward(dy);
    EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad)) << dim;
  }
}

TEST_F(TpUneven, VocabParallelEmbeddingWithAnUnevenVocabulary) {
  for (std::int64_t vocab : {5, 7, 11}) {
    nn::Embedding serial(vocab, 4);
    fill_random(serial.weight, 31);
    auto parallel = tp::VocabParallelEmbedding::from_serial(serial, tp, "embed");
    const ShardRange rows = shard_range(vocab, tp.size(), tp.rank());
    EXPECT_EQ(parallel->first_row(), rows.start);
    EXPECT_EQ(parallel->weight.value.size(0), rows.length);
    // Every id, the first and last of each rank's range among them.
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < vocab; ++i) ids.push_back((i * 3) % vocab);
    const Tensor id_tensor = ids_tensor(ids, {vocab});
    const Tensor dy = random_tensor({vocab, 4}, 32);
    const Tensor y_serial = serial.forward(id_tensor);
    serial.backward(dy);
    EXPECT_TRUE(tensors_close(parallel->forward(id_tensor), y_serial, 0)) << vocab;
    parallel->backward(dy);
    EXPECT_TRUE(tensors_close(master_grad(parallel->weight, tp), serial.weight.grad)) << vocab;
  }
}

TEST_F(TpUneven, ConvolutionsWithUnevenChannels) {
  nn::Conv2dOptions same;
  same.padding_h = same.padding_w = 1;
  for (bool sharded_hidden : {false, true}) {
    const std::string what = sharded_hidden ? "hidden sharded" : "hidden gathered";
    // Column over 7 output channels, row over 7 input channels: the hidden width is uneven.
    nn::Conv2d serial_col(3, 7, 3, 3, same), serial_row(7, 5, 3, 3, same);
    fill_random(serial_col.weight, 41);
    fill_random(serial_col.bias, 42);
    fill_random(serial_row.weight, 43);
    fill_random(serial_row.bias, 44);
    auto col = tp::ColumnParallelConv2d::from_serial(serial_col, tp, !sharded_hidden, "enc.col");
    auto row = tp::RowParallelConv2d::from_serial(serial_row, tp, sharded_hidden, "enc.row");
    EXPECT_EQ(col->weight.value.size(0), shard_range(7, tp.size(), tp.rank()).length);
    EXPECT_EQ(row->weight.value.size(1), shard_range(7, tp.size(), tp.rank()).length);

    const Tensor x = random_tensor({2, 3, 6, 5}, 45);
    const Tensor dy = random_tensor({2, 5, 6, 5}, 46);
    const Tensor y_serial = serial_row.forward(serial_col.forward(x));
    const Tensor dx_serial = serial_col.backward(serial_row.backward(dy));
    EXPECT_TRUE(tensors_close(row->forward(col->forward(x)), y_serial)) << what;
    EXPECT_TRUE(tensors_close(col->backward(row->backward(dy)), dx_serial)) << what;
    EXPECT_TRUE(tensors_close(master_grad(col->weight, tp), serial_col.weight.grad)) << what;
    EXPECT_TRUE(tensors_close(master_grad(col->bias, tp), serial_col.bias.grad)) << what;
    EXPECT_TRUE(tensors_close(master_grad(row->weight, tp), serial_row.weight.grad)) << what;
    EXPECT_TRUE(tensors_close(row->bias.grad, serial_row.bias.grad)) << what;
  }
}

// ---------------------------------------------------------------------------
// Vocab-parallel cross-entropy, and GPT-2's vocabulary end to end
// ---------------------------------------------------------------------------

TEST_F(TpUneven, CrossEntropyOverUnevenVocabularyShards) {
  const std::int64_t ignore = -100;
  for (std::int64_t vocab : {5, 7, 11}) {
    const Tensor logits = scaled(random_tensor({6, vocab}, 50 + vocab), 20.0f);
    // Each rank's first and last column among the targets, one ignored row.
    const std::vector<std::int64_t> targets = {0, vocab - 1, ignore, vocab / 2, 1, vocab - 2};
    const SerialCe want = serial_cross_entropy(logits, targets, ignore);
    const auto got = tp::vocab_parallel_cross_entropy(tp::split_along(logits, 1, tp), ids_tensor(targets, {6}), tp,
                                                      ignore);
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << vocab;
    EXPECT_EQ(got.counted, 5);
    EXPECT_TRUE(tensors_close(got.grad_logits, tp::split_along(want.grad, 1, tp))) << vocab;
    // A target past the (uneven) vocabulary is named on every rank.
    expect_error<InvalidArgument>(
        [&] {
          tp::vocab_parallel_cross_entropy(tp::split_along(logits, 1, tp),
                                           ids_tensor({0, 1, vocab, 2, 3, 4}, {6}), tp, ignore);
        },
        {"target " + std::to_string(vocab) + " of row 2", "[0, " + std::to_string(vocab) + ")"});
  }
}

// VocabParallelEmbedding -> column-parallel head (no gather) -> vocab-parallel
// cross-entropy, at GPT-2's 50257 (tp 2: 25129 + 25128, tp 4: 12565 + 3 x 12564).
TEST_F(TpUneven, Gpt2VocabularyThroughEmbeddingHeadAndCrossEntropy) {
  const std::int64_t vocab = 50257, d = 8, batch = 2, seq = 3;
  nn::Embedding serial_embed(vocab, d);
  nn::Linear serial_head(d, vocab, /*bias=*/false);
  fill_random(serial_embed.weight, 61);
  fill_random(serial_head.weight, 62);
  auto embed = tp::VocabParallelEmbedding::from_serial(serial_embed, tp, "embed");
  auto head = tp::ColumnParallelLinear::from_serial(serial_head, tp, /*gather_output=*/false, "head");
  EXPECT_EQ(head->weight.value.size(0), shard_range(vocab, tp.size(), tp.rank()).length);

  const Tensor ids = ids_tensor({0, 50256, 12564, 12565, 25128, 25129}, {batch, seq});
  const std::vector<std::int64_t> targets = {50256, 0, 25129, 12565, 37693, 25128};

  const Tensor logits_serial = serial_head.forward(serial_embed.forward(ids));
  const SerialCe want = serial_cross_entropy(logits_serial.reshape({batch * seq, vocab}), targets, -100);
  serial_embed.backward(serial_head.backward(want.grad.reshape({batch, seq, vocab})));

  const Tensor logits = head->forward(embed->forward(ids));
  EXPECT_TRUE(tensors_close(logits, tp::split_along(logits_serial, -1, tp)));
  const auto ce = tp::vocab_parallel_cross_entropy(logits.reshape({batch * seq, logits.size(2)}),
                                                   ids_tensor(targets, {batch * seq}), tp);
  EXPECT_NEAR(ce.loss, want.loss, 1e-5 * std::abs(want.loss));
  embed->backward(head->backward(ce.grad_logits.reshape(logits.shape())));
  EXPECT_TRUE(tensors_close(master_grad(head->weight, tp), serial_head.weight.grad));
  EXPECT_TRUE(tensors_close(master_grad(embed->weight, tp), serial_embed.weight.grad));
}

// ---------------------------------------------------------------------------
// Checkpoints: written at tp = world size (uneven), read at tp 1 and 2
// ---------------------------------------------------------------------------

namespace {

std::unique_ptr<Mesh> sub_mesh(int ranks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return nullptr;
  ParallelismConfig config;
  config.tensor = ranks;
  auto mesh = std::make_unique<Mesh>(comm, config);
  MPI_Comm_free(&comm);
  return mesh;
}

// The serial model: embedding 50257 x 4 -> linear 4 -> 7 -> linear 7 -> 5.
std::unique_ptr<nn::Sequential> serial_model(std::uint64_t seed) {
  auto model = std::make_unique<nn::Sequential>();
  auto& embed = static_cast<nn::Embedding&>(model->append(std::make_unique<nn::Embedding>(50257, 4)));
  auto& up = static_cast<nn::Linear&>(model->append(std::make_unique<nn::Linear>(4, 7)));
  auto& down = static_cast<nn::Linear&>(model->append(std::make_unique<nn::Linear>(7, 5)));
  fill_random(embed.weight, seed);
  fill_random(up.weight, seed + 1);
  fill_random(up.bias, seed + 2);
  fill_random(down.weight, seed + 3);
  fill_random(down.bias, seed + 4);
  return model;
}

// Its tensor-parallel twin over `tp`: vocab-parallel embedding, column 4 -> 7 (7 uneven
// at tp 2 and 4), row 7 -> 5.
std::unique_ptr<nn::Sequential> parallel_model(Communicator& tp, std::uint64_t seed) {
  auto serial = serial_model(seed);
  auto model = std::make_unique<nn::Sequential>();
  model->append(tp::VocabParallelEmbedding::from_serial(static_cast<nn::Embedding&>(serial->at("0")), tp, "0"));
  model->append(tp::ColumnParallelLinear::from_serial(static_cast<nn::Linear&>(serial->at("1")), tp, false, "1"));
  model->append(tp::RowParallelLinear::from_serial(static_cast<nn::Linear&>(serial->at("2")), tp, true, "2"));
  return model;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.contiguous(), hb = b.contiguous();
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

}  // namespace

TEST_F(TpUneven, CheckpointAtUnevenTpLoadsAtTp1AndTp2) {
  const int world = tp.size();
  const std::uint64_t seed = 71;
  const std::string root =
      (std::filesystem::current_path() / ("scratch_tp_uneven_np" + std::to_string(world))).string();
  if (tp.rank() == 0) std::filesystem::remove_all(root);
  tp.barrier();
  {
    auto mesh = sub_mesh(world);
    auto model = parallel_model(mesh->tp(), seed);
    io::SaveOptions o;
    o.step = 1;
    io::save_checkpoint(root, *mesh, *model, nullptr, o);
  }
  tp.barrier();
  for (int ranks : {1, 2}) {
    if (ranks > world) continue;
    if (auto mesh = sub_mesh(ranks)) {
      auto model = parallel_model(mesh->tp(), seed + 1000);  // other values before the load
      const auto loaded = io::load_checkpoint(root, *mesh, *model);
      EXPECT_EQ(loaded.loaded.size(), 5u);
      EXPECT_EQ(loaded.saved_mesh.tensor, world);
      auto serial = serial_model(seed);
      auto got = model->named_parameters(), want = serial->named_parameters();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const Parameter& p = *got[i].second;
        EXPECT_EQ(got[i].first, want[i].first);
        Tensor block = want[i].second->value;
        for (int d = 0; d < block.dim(); ++d) block = block.narrow(d, p.local_offset[d], p.value.shape()[d]);
        EXPECT_TRUE(same_bytes(p.value, block)) << got[i].first << " at tp " << ranks << " from tp " << world;
      }
    }
    tp.barrier();
  }
  if (tp.rank() == 0) std::filesystem::remove_all(root);
}
