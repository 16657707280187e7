#include "tessera/models/channel_mlp.hpp"

#include "tessera/nn/activation.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"

namespace tessera::models {

namespace {

// a + b into a new tensor (the residual must not alias a child's output or cache).
Tensor residual_add(const Tensor& a, const Tensor& b, const std::string& layer) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    throw ShapeError(layer + ": residual " + a.str() + " and mlp output " + b.str() +
                     " must have one shape and dtype");
  }
  Tensor sum = a.clone();
  ops::axpy(1.0, b.contiguous(), sum);
  return sum;
}

}  // namespace

ChannelMlpBlock::ChannelMlpBlock(std::int64_t channels, std::int64_t hidden, DType dtype, Device device)
    : channels_(channels), hidden_(hidden) {
  if (channels < 1 || hidden < 1) throw InvalidArgument(describe() + ": channels and hidden must both be >= 1");
  auto mlp = std::make_unique<nn::Sequential>();
  mlp->append(std::make_unique<nn::Conv2d>(channels, hidden, 1, 1, nn::Conv2dOptions{}, /*bias=*/true, dtype, device));
  mlp->append(std::make_unique<nn::GELU>());
  mlp->append(std::make_unique<nn::Conv2d>(hidden, channels, 1, 1, nn::Conv2dOptions{}, /*bias=*/true, dtype, device));
  register_child("mlp", std::move(mlp));
}

std::string ChannelMlpBlock::describe() const {
  return "ChannelMlpBlock(channels=" + std::to_string(channels_) + ", hidden=" + std::to_string(hidden_) + ")";
}

Tensor ChannelMlpBlock::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  // Through at(): apply_tensor_parallel replaces mlp.0 and mlp.2 in place.
  return residual_add(input, at("mlp").forward(input), describe());
}

Tensor ChannelMlpBlock::backward(const Tensor& grad_output) {
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  return residual_add(grad_output, at("mlp").backward(grad_output), describe());
}

ChannelMlpModel::ChannelMlpModel(std::int64_t channels, std::int64_t hidden, std::int64_t n_blocks, DType dtype,
                                 Device device)
    : channels_(channels), hidden_(hidden), n_blocks_(n_blocks) {
  if (channels < 1 || hidden < 1 || n_blocks < 0) {
    throw InvalidArgument(describe() + ": channels and hidden must be >= 1 and n_blocks >= 0");
  }
  auto blocks = std::make_unique<nn::Sequential>();
  for (std::int64_t i = 0; i < n_blocks; ++i) blocks->append(std::make_unique<ChannelMlpBlock>(channels, hidden, dtype, device));
  register_child("blocks", std::move(blocks));
}

std::string ChannelMlpModel::describe() const {
  return "ChannelMlpModel(channels=" + std::to_string(channels_) + ", hidden=" + std::to_string(hidden_) +
         ", n_blocks=" + std::to_string(n_blocks_) + ")";
}

Tensor ChannelMlpModel::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  return at("blocks").forward(input);
}

Tensor ChannelMlpModel::backward(const Tensor& grad_output) {
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  return at("blocks").backward(grad_output);
}

}  // namespace tessera::models
