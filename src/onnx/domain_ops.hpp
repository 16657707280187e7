#pragma once
// The ops a node becomes when it reads a split value (domain_layout.hpp): what the
// placement pass (domain_placement.hpp) puts in place of the node's own Op.
//
// Every one of them is a SplitOp: it knows the layouts of its outputs, and its backward
// sums the gradients of its whole inputs (a Conv's weight, a bias, a norm's scale) over
// the domain's ranks, because each rank computed only its block's share of them. That
// one rule makes a parameter's gradient the full one, the same on every rank, whatever
// mix of split and whole nodes reads it.
//
//   LocalOp       the node's own op on the local block (elementwise, channel mixing,
//                 Concat of channels, MaxPool 2x2 on even blocks, nearest upsampling)
//   HaloOp        the op with its padding removed, on the block with a halo (SplitHalo)
//                 of the width the op reads beyond it; optionally cropped (linear Resize)
//   GlobalSumOp   a reduction over every split axis (ReduceSum, ReduceMean,
//                 GlobalAveragePool): the local result, weighted by the block's share of
//                 the field for a mean, summed over the ranks
//   SplitInstanceNormOp  InstanceNormalization with the mean and variance over the
//                 whole field (two sums over the ranks forward, one backward)
//   PassOp        Pad, and the Slices and Concat of a periodic wrap: no work, the value
//                 stays the unpadded block and its layout carries the padding to the
//                 Conv or pool that reads it

#include <functional>
#include <memory>
#include <vector>

#include "onnx/domain_halo.hpp"
#include "onnx/domain_layout.hpp"
#include "onnx/op.hpp"
#include "tessera/comm.hpp"

namespace tessera::onnx {

class SplitOp : public Op {
 public:
  SplitOp(const NodeSpec& node, std::vector<Layout> inputs, Communicator& comm)
      : Op(node), inputs_(std::move(inputs)), comm_(&comm) {}
  // Valid after the first forward.
  const std::vector<Layout>& output_layouts() const { return outputs_; }
  // How the node runs split: "local", "halo lat 1+1, lon 1+1", "sum over ranks", ...
  virtual std::string describe() const = 0;
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) final;

 protected:
  virtual std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) = 0;
  std::vector<Layout> inputs_;
  std::vector<Layout> outputs_;
  Communicator* comm_;
};

// The node's own op; the output layouts are given, or computed once from the first
// forward's shapes (a Reshape's).
class LocalOp : public SplitOp {
 public:
  using LayoutRule = std::function<std::vector<Layout>(const std::vector<Value>& in, const std::vector<Value>& out)>;
  LocalOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, LayoutRule rule);
  std::vector<Value> forward(const std::vector<Value>& inputs) override;
  bool differentiable_input(std::size_t index) const override { return op_->differentiable_input(index); }
  std::string describe() const override { return "local on the block"; }

 private:
  std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) override;
  std::unique_ptr<Op> op_;
  LayoutRule rule_;
};

struct HaloCrop {
  std::int64_t lat = 0, lon = 0;  // rows/columns dropped at both ends of the output
};

// `op`: the node rebuilt without its padding. `rewrite` (may be empty) adjusts the other
// inputs for the haloed block (a Resize's sizes).
class HaloOp : public SplitOp {
 public:
  using InputRewrite = std::function<void(std::vector<Value>& inputs, const Tensor& haloed)>;
  HaloOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, std::unique_ptr<SplitHalo> halo,
         Layout output, HaloCrop crop, InputRewrite rewrite);
  std::vector<Value> forward(const std::vector<Value>& inputs) override;
  bool differentiable_input(std::size_t index) const override { return op_->differentiable_input(index); }
  std::string describe() const override;

 private:
  std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) override;
  std::unique_ptr<Op> op_;
  std::unique_ptr<SplitHalo> halo_;  // null when the op reads no halo
  HaloCrop crop_;
  InputRewrite rewrite_;
  Shape haloed_output_shape_;
};

class GlobalSumOp : public SplitOp {
 public:
  // weight: this block's share of the reduced elements for a mean (local / global), 1 for a sum.
  GlobalSumOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, double weight);
  std::vector<Value> forward(const std::vector<Value>& inputs) override;
  bool differentiable_input(std::size_t index) const override { return op_->differentiable_input(index); }
  std::string describe() const override { return weight_ == 1.0 ? "sum over ranks" : "mean over ranks"; }

 private:
  std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) override;
  std::unique_ptr<Op> op_;
  double weight_;
};

class SplitInstanceNormOp : public SplitOp {
 public:
  SplitInstanceNormOp(const NodeSpec& node, std::vector<Layout> inputs, Communicator& comm);
  std::vector<Value> forward(const std::vector<Value>& inputs) override;
  bool differentiable_input(std::size_t index) const override { return index < 3; }
  std::string describe() const override { return "mean and variance over ranks"; }

 private:
  std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) override;
  template <class T> std::vector<Value> forward_typed(const std::vector<Value>& inputs);
  template <class T> std::vector<Tensor> backward_typed(const Tensor& grad);
  double epsilon_;
  std::int64_t planes_ = 0, plane_ = 0;  // N * C, local elements per (n, c)
  double count_ = 0;                     // elements per (n, c) over the whole field
  Shape x_shape_;
  DType dtype_ = DType::f32;
  std::vector<double> xhat_, inv_std_;
  Tensor scale_;
};

// Output `source` of the inputs, unchanged, with the given layout.
class PassOp : public SplitOp {
 public:
  PassOp(const NodeSpec& node, std::vector<Layout> inputs, Communicator& comm, std::size_t source, Layout output);
  std::vector<Value> forward(const std::vector<Value>& inputs) override;
  bool differentiable_input(std::size_t index) const override { return index == source_; }
  std::string describe() const override { return "padding, read by the next window as its halo (" + outputs_[0].str() + ")"; }

 private:
  std::vector<Tensor> split_backward(const std::vector<Tensor>& grad_outputs) override;
  std::size_t source_;
  std::size_t inputs_count_ = 0;
};

}  // namespace tessera::onnx
