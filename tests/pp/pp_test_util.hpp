#pragma once
// Shared pieces of the pipeline tests: a Sequential of Linear blocks (nested
// Sequentials, so stage splits cross them), its tensor-parallel plan, the MSE loss of a
// microbatch, and comparisons of a stage's parameters with the serial twin's.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/pp/pipeline.hpp"
#include "tessera/tp/parallelize.hpp"
#include "../tp/tp_test_util.hpp"

namespace tessera::testing {

inline constexpr std::int64_t kWidth = 6, kHidden = 8, kOut = 3;

// Units in forward order: 0.0 Linear, 0.1 GELU, 0.2 Linear, 1.0 Linear, 1.1 GELU,
// 1.2 Linear, 2 Linear, 3 Linear.
inline std::unique_ptr<nn::Sequential> make_blocks_model() {
  auto root = std::make_unique<nn::Sequential>();
  for (int b = 0; b < 2; ++b) {
    auto block = std::make_unique<nn::Sequential>();
    block->append(std::make_unique<nn::Linear>(kWidth, kHidden));
    block->append(std::make_unique<nn::GELU>());
    block->append(std::make_unique<nn::Linear>(kHidden, kWidth));
    root->append(std::move(block));
  }
  root->append(std::make_unique<nn::Linear>(kWidth, kWidth));
  root->append(std::make_unique<nn::Linear>(kWidth, kOut));
  return root;
}

// Megatron's MLP in each block: column-parallel up, row-parallel down (the block's
// output is whole on every tp rank, so a stage boundary may follow it).
inline tp::ParallelizePlan blocks_tp_plan() {
  return {{"0.0", tp::ParallelStyle::colwise()},
          {"0.2", tp::ParallelStyle::rowwise()},
          {"1.0", tp::ParallelStyle::colwise()},
          {"1.2", tp::ParallelStyle::rowwise()}};
}

// The share of 0.5 * sum((y - t)^2) / n that the microbatch holds, and its gradient;
// n = the batch's rows times `row_elements` (the elements of one whole row; 0: y's last
// dim, as for [rows, kOut] outputs). `targets` holds this rank's part of every row.
inline double mse_share(const Tensor& y, const Tensor& targets, const pp::Microbatch& mb, Tensor& grad,
                        std::int64_t row_elements = 0) {
  const Tensor t = targets.narrow(0, mb.begin, mb.end - mb.begin).contiguous();
  const auto yv = y.contiguous().to_vector<float>(), tv = t.to_vector<float>();
  const double n = static_cast<double>(mb.batch_rows) *
                   static_cast<double>(row_elements > 0 ? row_elements : y.size(y.dim() - 1));
  std::vector<float> g(yv.size());
  double loss = 0;
  for (std::size_t i = 0; i < yv.size(); ++i) {
    const double d = static_cast<double>(yv[i]) - static_cast<double>(tv[i]);
    loss += 0.5 * d * d / n;
    g[i] = static_cast<float>(d / n);
  }
  grad = Tensor::from_vector(g, y.shape());
  return loss;
}

// The block of `master` that a local shard at `offset` with `shape` holds.
inline Tensor master_block(const Tensor& master, const Shape& offset, const Shape& shape) {
  Tensor t = master;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) t = t.narrow(d, offset.empty() ? 0 : offset[d], shape[d]);
  return t.contiguous();
}

// Every parameter the stage holds (value or grad) against the serial twin's, by FQN.
inline void expect_stage_matches(nn::Module& serial, nn::Module& stage, bool grads, const std::string& what,
                                 double rel = 1e-5) {
  for (const auto& [name, p] : stage.named_parameters()) {
    Parameter* want = nullptr;
    for (const auto& [n, q] : serial.named_parameters()) {
      if (n == name) want = q;
    }
    ASSERT_NE(want, nullptr) << what << ": " << name << " is not a parameter of the serial model";
    ASSERT_EQ(p->global_shape, want->value.shape()) << what << ": " << name;
    const Tensor& master = grads ? want->grad : want->value;
    const Tensor& got = grads ? p->grad : p->value;
    EXPECT_TRUE(tensors_close(got, master_block(master, p->local_offset, got.shape()), rel))
        << what << ": " << (grads ? "grad of " : "") << name << " (" << p->placement.str() << ")";
  }
}

}  // namespace tessera::testing
