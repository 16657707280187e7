#pragma once
// Column- and row-parallel 1x1 Conv2d on NCHW fields: a 1x1 convolution is a Linear
// over the channel dim at every grid point, and these layers share the Linear layers'
// partition rules (one implementation, src/tp/parallel_affine.cpp). CREDIT calls them
// ColumnParallelConv2d / RowParallelConv2d: those names remain as aliases.
//
// ColumnParallelConv2d: weight [C_out, C_in, 1, 1] sharded along dim 0; input (B, C_in, H, W)
//   replicated; output (B, C_out/tp, H, W) sharded along channels (all-gathered when
//   gather_output); backward all-reduces the input gradient.
// RowParallelConv2d: weight sharded along dim 1; input (B, C_in/tp, H, W) sharded along
//   channels (input_is_parallel, the default — it follows a ColumnParallelConv2d) or split here;
//   partial outputs all-reduced, then the replicated bias added once.
//
// Only plain 1x1 convolutions can be tensor-parallel: from_serial rejects any other
// kernel, stride, padding, dilation or groups with an error naming the layer — the
// rebuilt layer would otherwise silently drop them.

#include <memory>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/linear.hpp"

namespace tessera::tp {

class ColumnParallelConv2d : public nn::Module {
 public:
  ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool gather_output = false,
              ParallelLinearOptions options = {});
  static std::unique_ptr<ColumnParallelConv2d> from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                  bool gather_output = false, const std::string& name = "");
  std::unique_ptr<nn::Conv2d> to_serial();  // collective over tp

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "ColumnParallelConv2d"; }
  Tensor master_weight();
  Tensor master_bias();
  bool has_bias() const { return has_bias_; }

  Parameter weight, bias;

 private:
  std::int64_t in_, out_;
  Communicator& tp_;
  bool gather_output_, has_bias_;
  std::string label_;
  Tensor input_;  // saved by forward for backward
};

class RowParallelConv2d : public nn::Module {
 public:
  RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp, bool input_is_parallel = true,
              ParallelLinearOptions options = {});
  static std::unique_ptr<RowParallelConv2d> from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                  bool input_is_parallel = true, const std::string& name = "");
  std::unique_ptr<nn::Conv2d> to_serial();

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "RowParallelConv2d"; }
  Tensor master_weight();
  Tensor master_bias();
  bool has_bias() const { return has_bias_; }

  Parameter weight, bias;

 private:
  std::int64_t in_, out_;
  Communicator& tp_;
  bool input_is_parallel_, has_bias_;
  std::string label_;
  Tensor input_local_;
};

// CREDIT's names for the same layers.
using TpColConv2d = ColumnParallelConv2d;
using TpRowConv2d = RowParallelConv2d;

// Throws InvalidArgument naming `layer` unless `conv` is a plain 1x1 convolution.
void require_plain_1x1(const nn::Conv2d& conv, const std::string& layer);

}  // namespace tessera::tp
