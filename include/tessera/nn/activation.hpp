#pragma once
// Parameter-free element-wise activations.

#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

// GELU, the exact form x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (PyTorch's default).
class GELU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "GELU"; }
  void visit_activations(ActivationVisitor& v) override { v.tensor(input_); }

 private:
  Tensor input_;
};

// SiLU (swish): x * sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "SiLU"; }
  void visit_activations(ActivationVisitor& v) override { v.tensor(input_); }

 private:
  Tensor input_;
};

}  // namespace tessera::nn
