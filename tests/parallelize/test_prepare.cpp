// The seed's input/output preparations (make_input_* / make_output_*) on Colwise and
// Rowwise Linear layers, every combination, at tp = 1, 2, 4, against the serial layer:
// each rank feeds its input in the prepared layout and must get its block of the serial
// output in the prepared layout, its block of the serial input gradient, and (after
// sync_replicated_gradients) the serial weight and bias gradients reassembled.

#include <gtest/gtest.h>

#include "mpi_test.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"
#include "../tp/tp_test_util.hpp"

using namespace tessera;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;
using tp::ParallelStyle;
using tp::Prepare;

namespace {

// x [B, S, in] with B, S, in and out divisible by 1, 2 and 4.
constexpr std::int64_t kB = 4, kS = 8, kIn = 8, kOut = 12;

struct Named {
  const char* name;
  Prepare prepare;
};

// This rank's view of a whole tensor in `p`'s layout.
Tensor local_view(const Tensor& whole, const Prepare& p, Communicator& tp) {
  switch (p.layout) {
    case tp::Layout::replicate: return whole;
    case tp::Layout::shard_features: return tp::split_along(whole, -1, tp);
    case tp::Layout::shard_sequence: return tp::split_along(whole, p.dim.value_or(1), tp);
  }
  return whole;
}

class Prepared : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};

  void expect_matches_serial(ParallelStyle::Kind kind, const Named& in, const Named& out, Shape x_shape = {kB, kS, kIn},
                             std::int64_t out_features = kOut) {
    const std::string what = std::string(kind == ParallelStyle::Kind::colwise ? "Colwise" : "Rowwise") + "(" +
                             in.name + ", " + out.name + ")";
    auto build = [&] {
      auto m = std::make_unique<nn::Sequential>();
      m->append(std::make_unique<nn::Linear>(x_shape.back(), out_features));
      nn::initialize_parameters(*m, 11, "prep");
      return m;
    };
    auto serial = build();
    auto parallel = build();
    const ParallelStyle style = kind == ParallelStyle::Kind::colwise ? ParallelStyle::colwise(in.prepare, out.prepare)
                                                                       : ParallelStyle::rowwise(in.prepare, out.prepare);
    tp::parallelize(*parallel, tp, {{"0", style}});

    const Tensor x = random_tensor(x_shape, 21);
    Shape y_shape = x_shape;
    y_shape.back() = out_features;
    const Tensor dy = random_tensor(y_shape, 22);
    const Tensor y = serial->forward(x);
    const Tensor dx = serial->backward(dy);

    const Tensor y_local = parallel->forward(local_view(x, in.prepare, tp));
    EXPECT_TRUE(tensors_close(y_local, local_view(y, out.prepare, tp))) << what << ": output";
    const Tensor dx_local = parallel->backward(local_view(dy, out.prepare, tp));
    EXPECT_TRUE(tensors_close(dx_local, local_view(dx, in.prepare, tp))) << what << ": input gradient";
    tp::sync_replicated_gradients(*parallel, tp);
    const auto want = serial->named_parameters();
    const auto got = parallel->named_parameters();
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first) << what;
      EXPECT_TRUE(tensors_close(tp::assemble_master(*got[i].second, got[i].second->grad, tp), want[i].second->grad))
          << what << ": " << got[i].first;
    }
  }
};

const Named kInputs[] = {
    {"make_input_replicate_1d", tp::make_input_replicate_1d()},
    {"make_input_shard_1d(0)", tp::make_input_shard_1d(0)},
    {"make_input_shard_1d(1)", tp::make_input_shard_1d(1)},
    {"make_input_shard_1d(-1)", tp::make_input_shard_1d(-1)},
    {"make_input_shard_1d_last_dim", tp::make_input_shard_1d_last_dim()},
    {"make_input_reshard_replicate", tp::make_input_reshard_replicate()},
};
const Named kOutputs[] = {
    {"make_sharded_output_tensor", tp::make_sharded_output_tensor()},
    {"make_output_tensor", tp::make_output_tensor()},
    {"make_output_replicate_1d", tp::make_output_replicate_1d()},
    {"make_output_shard_1d(0)", tp::make_output_shard_1d(0)},
    {"make_output_shard_1d(1)", tp::make_output_shard_1d(1)},
    {"make_output_shard_1d(-1)", tp::make_output_shard_1d(-1)},
    {"make_output_reshard_tensor", tp::make_output_reshard_tensor()},
};

}  // namespace

TEST_F(Prepared, EveryColwiseInputAndOutputPreparationMatchesSerial) {
  for (const Named& in : kInputs) {
    for (const Named& out : kOutputs) expect_matches_serial(ParallelStyle::Kind::colwise, in, out);
  }
}

TEST_F(Prepared, EveryRowwiseInputAndOutputPreparationMatchesSerial) {
  for (const Named& in : kInputs) {
    for (const Named& out : kOutputs) expect_matches_serial(ParallelStyle::Kind::rowwise, in, out);
  }
}

// Uneven blocks (tessera's partition rule: the first extent % tp ranks hold one more):
// features 6 -> 10 and a batch of 6 at tp 4 (2,2,1,1 / 3,3,2,2 / 2,2,1,1), through the
// layers' own feature splits and the LayoutWrapper's batch gather (Rowwise input) and
// split (Colwise output).
TEST_F(Prepared, UnevenFeaturesAndBatchMatchSerial) {
  const Shape x_shape = {6, 4, 6};
  const Named in_features{"make_input_shard_1d_last_dim", tp::make_input_shard_1d_last_dim()};
  const Named in_batch{"make_input_shard_1d(0)", tp::make_input_shard_1d(0)};
  const Named replicate_in{"make_input_replicate_1d", tp::make_input_replicate_1d()};
  const Named out_features{"make_sharded_output_tensor", tp::make_sharded_output_tensor()};
  const Named out_batch{"make_output_shard_1d(0)", tp::make_output_shard_1d(0)};
  const Named replicate_out{"make_output_tensor", tp::make_output_tensor()};
  for (const Named& out : {out_features, out_batch, replicate_out}) {
    expect_matches_serial(ParallelStyle::Kind::colwise, replicate_in, out, x_shape, 10);
  }
  // (A Rowwise Shard(dim) output is a reduce-scatter, which, like a Colwise Shard(dim)
  // input's all-gather, runs the sequence-parallel path: it needs an even extent.)
  for (const Named& in : {in_features, in_batch, replicate_in}) {
    expect_matches_serial(ParallelStyle::Kind::rowwise, in, replicate_out, x_shape, 10);
  }
}

TEST_F(Prepared, SeedDefaultsAreTheStylesDefaults) {
  // ColwiseParallel(make_input_replicate_1d, make_sharded_output_tensor) and
  // RowwiseParallel(make_input_shard_1d_last_dim, make_output_tensor).
  EXPECT_EQ(ParallelStyle::colwise(tp::make_input_replicate_1d()).str(), ParallelStyle::colwise().str());
  EXPECT_EQ(ParallelStyle::rowwise(tp::make_input_shard_1d_last_dim()).str(), ParallelStyle::rowwise().str());
  EXPECT_EQ(ParallelStyle::colwise(tp::make_input_reshard_replicate(), tp::make_output_shard_1d(1)).str(),
            "Colwise(input=Shard(dim 0), output=Shard(dim 1))");
}

TEST_F(Prepared, ConvolutionsKeepTheirFixedLayoutsAndSayWhich) {
  auto m = std::make_unique<nn::Sequential>();
  m->append(std::make_unique<nn::Conv2d>(4, 8, 3, 3));
  try {
    tp::parallelize(*m, tp, {{"0", ParallelStyle::colwise(tp::make_input_shard_1d(0))}});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("a Colwise Conv2d takes a Replicate input"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Conv2d '0'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m->at("0").type_name(), "Conv2d");  // untouched
}
