#pragma once
// CREDIT-style channel MLP on (B, C, H, W) fields: a residual block of two 1x1
// convolutions that opts in to apply_tensor_parallel by declaring its column- and
// row-parallel children (CREDIT's `_tp_col` / `_tp_row`).

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::models {

// y = x + mlp(x), with child "mlp" = Sequential{Conv2d 1x1 channels -> hidden ("mlp.0"),
// GELU ("mlp.1"), Conv2d 1x1 hidden -> channels ("mlp.2")}, both convolutions with bias
// (PyTorch's default). x [B, channels, H, W] -> the same shape.
// tensor_parallel_paths() = {column "mlp.0", row "mlp.2"}: the hidden channels are split
// over tp, GELU is element-wise and needs no change.
class ChannelMlpBlock : public nn::Module {
 public:
  ChannelMlpBlock(std::int64_t channels, std::int64_t hidden, DType dtype = DType::f32,
                  Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "ChannelMlpBlock"; }
  std::optional<TensorParallelPaths> tensor_parallel_paths() const override {
    return TensorParallelPaths{"mlp.0", "mlp.2"};
  }

  std::int64_t channels() const { return channels_; }
  std::int64_t hidden() const { return hidden_; }
  std::string describe() const;  // "ChannelMlpBlock(channels=4, hidden=8)"

 private:
  std::int64_t channels_, hidden_;
};

// Child "blocks": a Sequential of n_blocks ChannelMlpBlocks (FQNs blocks.0.mlp.0.weight ...).
class ChannelMlpModel : public nn::Module {
 public:
  ChannelMlpModel(std::int64_t channels, std::int64_t hidden, std::int64_t n_blocks, DType dtype = DType::f32,
                  Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "ChannelMlpModel"; }

  std::string describe() const;  // "ChannelMlpModel(channels=4, hidden=8, n_blocks=2)"

 private:
  std::int64_t channels_, hidden_, n_blocks_;
};

}  // namespace tessera::models
