#pragma once
// Conv2d, NCHW, groups = 1: the serial reference for the tensor-parallel 1x1 and the
// domain-parallel (halo-exchanging) convolutions. Parameters start zeroed;
// nn::initialize_parameters fills them from their InitSpecs (PyTorch nn.Conv2d's defaults).

#include <cstdint>
#include <string>

#include "tessera/nn/functional.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::nn {

using functional::Conv2dOptions;

class Conv2d : public Module {
 public:
  // weight [out_channels, in_channels, kernel_h, kernel_w]: kaiming_uniform(a = sqrt(5));
  // bias [out_channels]: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in * kh * kw.
  // `groups` exists so a port of a grouped convolution fails loudly: anything but 1 is
  // an InvalidArgument naming the layer.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, int kernel_h, int kernel_w,
         Conv2dOptions options = {}, bool bias = true, DType dtype = DType::f32, Device device = Device::host(),
         int groups = 1);

  // x [N, in_channels, H, W] -> [N, out_channels, OH, OW]; caches x for backward.
  Tensor forward(const Tensor& input) override;
  // Accumulates weight.grad (and bias.grad) and returns dx; releases the cached input.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "Conv2d"; }
  void visit_activations(ActivationVisitor& v) override { v.tensor(input_); }

  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  int kernel_h() const { return kernel_h_; }
  int kernel_w() const { return kernel_w_; }
  int groups() const { return 1; }
  const Conv2dOptions& options() const { return options_; }
  bool has_bias() const { return bias.value.defined(); }
  // "Conv2d(3, 8, kernel=3x5, stride=2x1, padding=1x0, dilation=1x2, bias=true)".
  std::string describe() const;

  Parameter weight, bias;  // bias.value is undefined when has_bias() is false

 private:
  std::int64_t in_channels_, out_channels_;
  int kernel_h_, kernel_w_;
  Conv2dOptions options_;
  Tensor input_;
};

}  // namespace tessera::nn
