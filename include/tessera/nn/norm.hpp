#pragma once
// Normalisations over the last dim, with the row statistics saved for backward.

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

// y = (x - mean) / sqrt(var + eps) * weight + bias, statistics over the last dim
// (biased variance, eps inside the square root, as PyTorch). With affine = false there
// are no parameters.
class LayerNorm : public Module {
 public:
  // weight [normalized_size]: ones; bias [normalized_size]: zeros.
  explicit LayerNorm(std::int64_t normalized_size, double eps = 1e-5, bool affine = true, DType dtype = DType::f32,
                     Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "LayerNorm"; }
  void visit_activations(ActivationVisitor& v) override {
    v.tensor(input_);
    v.tensor(mean_);
    v.tensor(rstd_);
  }

  std::int64_t normalized_size() const { return size_; }
  double eps() const { return eps_; }
  bool affine() const { return weight.value.defined(); }
  std::string describe() const;  // "LayerNorm(16, eps=1e-05, affine=true)"

  Parameter weight, bias;  // undefined values when affine() is false

 private:
  std::int64_t size_;
  double eps_;
  DType dtype_;  // kept apart from weight: with affine = false there is no weight
  Tensor input_, mean_, rstd_;
};

// y = x / sqrt(mean(x^2) + eps) * weight over the last dim.
class RMSNorm : public Module {
 public:
  // weight [size]: ones.
  explicit RMSNorm(std::int64_t size, double eps = 1e-6, DType dtype = DType::f32, Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "RMSNorm"; }
  void visit_activations(ActivationVisitor& v) override {
    v.tensor(input_);
    v.tensor(rstd_);
  }

  std::int64_t normalized_size() const { return size_; }
  double eps() const { return eps_; }
  std::string describe() const;  // "RMSNorm(16, eps=1e-06)"

  Parameter weight;

 private:
  std::int64_t size_;
  double eps_;
  Tensor input_, rstd_;
};

}  // namespace tessera::nn
