#pragma once
// Linear: y = x W^T + b over the last dim, the serial reference for the column- and
// row-parallel linears. Parameters start zeroed; nn::initialize_parameters fills them
// from their InitSpecs (PyTorch nn.Linear's defaults).

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

class Linear : public Module {
 public:
  // weight [out_features, in_features]: kaiming_uniform(a = sqrt(5));
  // bias [out_features]: uniform(-1/sqrt(in_features), 1/sqrt(in_features)).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, DType dtype = DType::f32,
         Device device = Device::host());

  // x [..., in_features] -> [..., out_features]; caches x for backward.
  Tensor forward(const Tensor& input) override;
  // Accumulates weight.grad (and bias.grad) and returns dx; releases the cached input.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "Linear"; }
  void visit_activations(ActivationVisitor& v) override { v.tensor(input_); }

  // PyTorch's defaults, shared with every layer that is "a Linear" (tensor-parallel
  // linears, 1x1 and kxk convolutions), so a converted model initialises identically.
  static InitSpec default_weight_init();                     // kaiming_uniform(a = sqrt(5))
  static InitSpec default_bias_init(std::int64_t fan_in);    // uniform(+-1/sqrt(fan_in))

  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }
  bool has_bias() const { return bias.value.defined(); }
  // "Linear(in_features=4, out_features=3, bias=true)", for error messages.
  std::string describe() const;

  Parameter weight, bias;  // bias.value is undefined when has_bias() is false

 private:
  std::int64_t in_features_, out_features_;
  Tensor input_;
};

}  // namespace tessera::nn
