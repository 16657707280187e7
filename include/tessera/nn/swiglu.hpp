#pragma once
// SwiGLU feed-forward (Llama's MLP): y = down(silu(gate(x)) * up(x)), the serial
// reference for the tensor-parallel MLP (gate/up column-parallel over the hidden dim,
// down row-parallel).

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

namespace functional {

// ---- Gated unit: silu(gate) * up elementwise (same shape and dtype), each element
// evaluated in double and rounded once, so a hidden-dim shard computes bit-for-bit what
// the serial layer computes on the same elements.
Tensor swiglu(const Tensor& gate, const Tensor& up);

struct SwiGluGrads {
  Tensor gate, up;  // the shapes of the forward inputs
};
SwiGluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);

}  // namespace functional

// Children "gate", "up" (Linear d_model -> hidden, no bias) and "down" (Linear
// hidden -> d_model, no bias), as in Llama. x [..., d_model] -> [..., d_model].
//
// Tensor-parallel contract: the projections are reached only through at() at forward
// and backward time (parallelize replaces them in place), and the hidden width is the
// width gate and up actually produce (hidden / tp under tensor parallelism), not the
// constructor's.
class SwiGLU : public Module {
 public:
  SwiGLU(std::int64_t d_model, std::int64_t hidden, DType dtype = DType::f32, Device device = Device::host());

  Tensor forward(const Tensor& input) override;
  // dx = the sum of the gate and up projections' input gradients.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "SwiGLU"; }
  void visit_activations(ActivationVisitor& v) override {
    v.tensor(gate_);
    v.tensor(up_);
    Module::visit_activations(v);  // gate, up, down
  }

  std::int64_t d_model() const { return d_model_; }
  std::int64_t hidden() const { return hidden_; }  // the full (serial) hidden width
  std::string describe() const;                    // "SwiGLU(d_model=8, hidden=16)"

 private:
  std::int64_t d_model_, hidden_;
  Tensor gate_, up_;
};

}  // namespace tessera::nn
