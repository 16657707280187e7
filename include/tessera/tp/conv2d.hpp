#pragma once
// Column- and row-parallel Conv2d on NCHW fields, any kernel, stride, padding and
// dilation nn::Conv2d has. Whatever the kernel, output channel o is a sum over input
// channels of per-channel window sums, so the weight [C_out, C_in, kh, kw] splits over
// C_out or C_in exactly as a Linear's [out, in]: these layers share the Linear layers'
// partition rules (one implementation, src/tp/parallel_affine.cpp), and the spatial
// part of the conv runs inside each rank's share of the channels. CREDIT calls them
// TpColConv2d / TpRowConv2d: those names remain as aliases.
//
// ColumnParallelConv2d: weight [C_out, C_in, kh, kw] sharded along dim 0 with its bias;
//   input (B, C_in, H, W) replicated; output (B, C_out/tp, OH, OW) sharded along channels
//   (all-gathered when gather_output); backward all-reduces the input gradient.
// RowParallelConv2d: weight sharded along dim 1; input (B, C_in/tp, H, W) sharded along
//   channels (input_is_parallel, the default — it follows a ColumnParallelConv2d) or split
//   here; partial outputs all-reduced, then the replicated bias added once.
//
// A domain-decomposed field: use_domain_halo(decomposition) replaces the conv's zero
// padding by the domain halo (domain::ConvHalo, the step DomainConv2d takes): the input
// is this rank's (lat, lon) block, its halo is filled from the neighbours (zero or
// periodic in longitude, by the pole policy beyond the poles) and the conv runs with no
// padding on the haloed block; backward sends the halo part of the input gradient back
// to its owners. The conv must then be "same" (2 * padding = dilation * (kernel - 1)
// on each axis, so output blocks tile the output grid); with a stride, every rank's
// extent along that axis must be a multiple of it, and the output is split as the
// (lat / stride, lon / stride) grid over the same process grid. With zero longitude
// padding and zero poles this equals the serial nn::Conv2d on the gathered field; the
// weight and bias gradients are then this rank's partial sums over its block, completed
// by domain::sync_domain_gradients as for DomainConv2d.

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/domain/conv_halo.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/parallel_layer.hpp"

namespace tessera::tp {

// The members both share (extents, kernel, conv_options, has_bias, the domain halo,
// master_weight, master_bias, to_serial) are ParallelLayer<nn::Conv2d>'s
// (parallel_layer.hpp). With a domain halo, a RowParallelConv2d's halo carries the input
// as given: this rank's C_in/tp channels with input_is_parallel, all C_in otherwise.
class ColumnParallelConv2d : public ParallelLayer<nn::Conv2d> {
 public:
  // 1x1, no stride/padding/dilation (CREDIT's TpColConv2d).
  ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp,
                       bool gather_output = false, ParallelLinearOptions options = {});
  // kernel_h x kernel_w with nn::Conv2d's options. The default weight and bias inits are
  // nn::Conv2d's (bias bound 1/sqrt(in * kh * kw)).
  ColumnParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h, int kernel_w,
                       Communicator& tp, nn::Conv2dOptions conv = {}, bool gather_output = false,
                       ParallelLinearOptions options = {});
  static std::unique_ptr<ColumnParallelConv2d> from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                           bool gather_output = false, const std::string& name = "");

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "ColumnParallelConv2d"; }

 private:
  bool gather_output_;
};

class RowParallelConv2d : public ParallelLayer<nn::Conv2d> {
 public:
  // 1x1, no stride/padding/dilation (CREDIT's TpRowConv2d).
  RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, Communicator& tp,
                    bool input_is_parallel = true, ParallelLinearOptions options = {});
  // kernel_h x kernel_w with nn::Conv2d's options and default inits.
  RowParallelConv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h, int kernel_w,
                    Communicator& tp, nn::Conv2dOptions conv = {}, bool input_is_parallel = true,
                    ParallelLinearOptions options = {});
  static std::unique_ptr<RowParallelConv2d> from_serial(const nn::Conv2d& serial, Communicator& tp,
                                                        bool input_is_parallel = true, const std::string& name = "");

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "RowParallelConv2d"; }

 private:
  bool input_is_parallel_;
};

// CREDIT's names for the same layers.
using TpColConv2d = ColumnParallelConv2d;
using TpRowConv2d = RowParallelConv2d;

}  // namespace tessera::tp
