// Mapping primitives at tp = 1, 2, 4: split / gather / reduce-scatter along every dim
// against the global tensor, and every forward/backward pair against its definition.

#include <gtest/gtest.h>

#include "mpi_test.hpp"
#include "tessera/tp/mappings.hpp"

using namespace tessera;
using namespace tessera::tp;

namespace {

// The "global" tensor every rank can build: element i = i + 0.5 (exact in f32/f64).
Tensor global_tensor(const Shape& shape, DType dtype = DType::f64) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) + 0.5;
  Tensor t = Tensor::from_vector(v, shape);
  if (dtype == DType::f64) return t;
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_vector(f, shape);
}

std::vector<double> values(const Tensor& t) {
  return t.dtype() == DType::f64 ? t.contiguous().to_vector<double>() : [&] {
    auto f = t.contiguous().to_vector<float>();
    return std::vector<double>(f.begin(), f.end());
  }();
}

Tensor scaled(const Tensor& t, double s) {
  Tensor out = t.clone();
  double* p = out.data<double>();
  for (std::int64_t i = 0; i < out.numel(); ++i) p[i] *= s;
  return out;
}

class MappingTest : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
  int p() const { return tp.size(); }
  int r() const { return tp.rank(); }
};

}  // namespace

TEST_F(MappingTest, SplitAndGatherAlongEveryDim) {
  const Tensor x = global_tensor({4, 8, 4});
  for (int dim = 0; dim < 3; ++dim) {
    const std::int64_t block = x.shape()[dim] / p();
    const Tensor mine = split_along(x, dim, tp);
    EXPECT_EQ(values(mine), values(x.narrow(dim, r() * block, block))) << "dim " << dim;
    const Tensor back = gather_along(mine, dim, tp);
    EXPECT_EQ(back.shape(), x.shape());
    EXPECT_EQ(values(back), values(x)) << "dim " << dim;
  }
  // Negative dims count from the end.
  EXPECT_EQ(values(split_along(x, -1, tp)), values(split_along(x, 2, tp)));
}

TEST_F(MappingTest, ReduceScatterSumsThenSplits) {
  const Tensor x = global_tensor({4, 4, 8}, DType::f32);
  for (int dim : {0, 2}) {
    // Rank q contributes (q + 1) * x: the sum is P(P+1)/2 * x.
    std::vector<float> mine;
    for (double v : values(x)) mine.push_back(static_cast<float>(v * (r() + 1)));
    const Tensor contribution = Tensor::from_vector(mine, x.shape());
    const Tensor out = reduce_scatter_along(contribution, dim, tp);
    const std::int64_t block = x.shape()[dim] / p();
    const auto expected_block = values(x.narrow(dim, r() * block, block));
    const auto got = values(out);
    ASSERT_EQ(got.size(), expected_block.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], expected_block[i] * p() * (p() + 1) / 2);
  }
}

TEST_F(MappingTest, ForwardBackwardPairs) {
  const Tensor x = global_tensor({2, 4, 4});
  const Tensor mine = scaled(x, r() + 1);  // rank-dependent data
  const double rank_sum = p() * (p() + 1) / 2.0;

  // copy: identity forward, all-reduce backward.
  EXPECT_EQ(values(copy_to_parallel(mine, tp)), values(mine));
  EXPECT_EQ(values(copy_to_parallel_backward(mine, tp)), values(scaled(x, rank_sum)));
  // reduce: all-reduce forward, identity backward.
  EXPECT_EQ(values(reduce_from_parallel(mine, tp)), values(scaled(x, rank_sum)));
  EXPECT_EQ(values(reduce_from_parallel_backward(mine, tp)), values(mine));
  // scatter: split forward, gather backward.
  EXPECT_EQ(values(scatter_to_parallel(x, 1, tp)), values(split_along(x, 1, tp)));
  EXPECT_EQ(values(scatter_to_parallel_backward(split_along(x, 1, tp), 1, tp)), values(x));
  // gather: gather forward, split backward.
  EXPECT_EQ(values(gather_from_parallel(split_along(x, 2, tp), 2, tp)), values(x));
  EXPECT_EQ(values(gather_from_parallel_backward(x, 2, tp)), values(split_along(x, 2, tp)));
  // sequence parallel: all-gather forward / reduce-scatter backward, and the reverse.
  EXPECT_EQ(values(sequence_all_gather(split_along(x, 1, tp), 1, tp)), values(x));
  EXPECT_EQ(values(sequence_all_gather_backward(mine, 1, tp)), values(split_along(scaled(x, rank_sum), 1, tp)));
  EXPECT_EQ(values(sequence_reduce_scatter(mine, 1, tp)), values(split_along(scaled(x, rank_sum), 1, tp)));
  EXPECT_EQ(values(sequence_reduce_scatter_backward(split_along(x, 1, tp), 1, tp)), values(x));
}

TEST_F(MappingTest, ModulesRunThePairs) {
  const Tensor x = global_tensor({2, 8});
  Mapping scatter(Mapping::Kind::scatter, tp, -1);
  Mapping gather(Mapping::Kind::gather, tp, -1);
  const Tensor local = scatter.forward(x);
  EXPECT_EQ(values(local), values(split_along(x, 1, tp)));
  EXPECT_EQ(values(gather.forward(local)), values(x));
  EXPECT_EQ(values(gather.backward(x)), values(local));
  EXPECT_EQ(values(scatter.backward(local)), values(x));
  EXPECT_EQ(scatter.type_name(), "ScatterToParallel");
  Mapping copy(Mapping::Kind::copy, tp);
  EXPECT_EQ(values(copy.backward(x)), values(scaled(x, p())));
}

TEST_F(MappingTest, IndivisibleExtentIsNamed) {
  if (p() == 1) GTEST_SKIP() << "every extent divides by 1";
  const Tensor x = global_tensor({3, p() + 1});
  // Uneven splits follow shard_range (test_tp_uneven); the sequence stays even.
  try {
    sequence_reduce_scatter(x, 1, tp);
    FAIL();
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dim 1"), std::string::npos) << what;
    EXPECT_NE(what.find("extent " + std::to_string(p() + 1)), std::string::npos) << what;
    EXPECT_NE(what.find("tp group size " + std::to_string(p())), std::string::npos) << what;
  }
  EXPECT_THROW(split_along(x, 2, tp), InvalidArgument);
}

TEST_F(MappingTest, SizeOneGroupIsFree) {
  Communicator self(MPI_COMM_SELF);
  const Tensor x = global_tensor({2, 4});
  EXPECT_EQ(values(gather_along(x, 1, self)), values(x));
  EXPECT_EQ(values(reduce_scatter_along(x, 0, self)), values(x));
  EXPECT_EQ(values(copy_to_parallel_backward(x, self)), values(x));
  EXPECT_EQ(self.stats().mpi_calls, 0);
}

// mp_reduce(x, op): forward the element-wise op over the ranks' inputs, computed here
// from every rank's known contribution (the serial twin); backward the identity for
// every op. mp_copy(x, op): forward identity, backward the op over the gradients.
TEST_F(MappingTest, ReduceAndCopyTakeTheSeedsOp) {
  const Shape shape{3, 4};
  // Rank q contributes c_q[i] = (i + 0.5) * (q % 2 == 0 ? q + 1 : -(q + 1)): signs and
  // magnitudes vary over ranks, so max, min, sum and avg all differ.
  auto contribution = [&](int q) {
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) + 0.5) * (q % 2 == 0 ? q + 1 : -(q + 1));
    return v;
  };
  const Tensor mine = Tensor::from_vector(contribution(r()), shape);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    std::vector<double> expected = contribution(0);
    for (int q = 1; q < p(); ++q) {
      const auto c = contribution(q);
      for (std::size_t i = 0; i < c.size(); ++i) {
        switch (op) {
          case ReduceOp::sum:
          case ReduceOp::avg: expected[i] += c[i]; break;
          case ReduceOp::max: expected[i] = std::max(expected[i], c[i]); break;
          case ReduceOp::min: expected[i] = std::min(expected[i], c[i]); break;
        }
      }
    }
    if (op == ReduceOp::avg) {
      for (double& e : expected) e /= p();
    }
    const std::string label(reduce_op_name(op));
    const auto forward = values(reduce_from_parallel(mine, tp, op));
    ASSERT_EQ(forward.size(), expected.size()) << label;
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_DOUBLE_EQ(forward[i], expected[i]) << label << " " << i;
    EXPECT_EQ(values(mine), contribution(r())) << label << ": the input is not modified";
    EXPECT_EQ(values(reduce_from_parallel_backward(mine, tp)), contribution(r())) << label;
    // The module form carries the op.
    Mapping reduce(Mapping::Kind::reduce, tp, -1, op);
    EXPECT_EQ(reduce.op(), op);
    EXPECT_EQ(values(reduce.forward(mine)), forward) << label;
    EXPECT_EQ(values(reduce.backward(mine)), contribution(r())) << label;
    // mp_copy's op reduces the gradient.
    Mapping copy(Mapping::Kind::copy, tp, -1, op);
    EXPECT_EQ(values(copy.forward(mine)), contribution(r())) << label;
    const auto grad = values(copy.backward(mine));
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_DOUBLE_EQ(grad[i], expected[i]) << label << " " << i;
    EXPECT_EQ(values(copy_to_parallel_backward(mine, tp, op)), grad) << label;
  }
  // The default op is the sum (the existing behaviour).
  EXPECT_EQ(values(reduce_from_parallel(mine, tp)), values(reduce_from_parallel(mine, tp, ReduceOp::sum)));
}

// At every group size, 1 included: the same model is refused at every layout.
TEST_F(MappingTest, ReduceAvgOfAnIntegerTensorIsRefused) {
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 3}, {3});
  try {
    reduce_from_parallel(ids, tp, ReduceOp::avg);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("avg is defined for floating dtypes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values(reduce_from_parallel(Tensor::from_vector(std::vector<double>{1, 2}, {2}), tp, ReduceOp::max)),
            (std::vector<double>{1, 2}));
  EXPECT_EQ(ids.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3}));
}
