#pragma once
// DomainConv2d: a kxk convolution over a (B, C, lat, lon) field split along latitude (or
// on a 2-D process grid) that equals the serial convolution of the gathered field.
//
// The serial twin is a "same" convolution (stride 1, output grid = input grid) whose
// input is padded by the dilated kernel's reach: total d*(k-1) per axis, split as
//   before = d*(k-1) / 2,   after = d*(k-1) - before
// (PyTorch's padding='same' split; odd kernels are symmetric, even kernels put the extra
// row/column after). Latitude padding at the true poles follows the pole policy (zero is
// ordinary zero padding); longitude padding is zero or periodic.
//
// forward  = ConvHalo::pad (copy the local block into a haloed buffer, exchange the
//            halo) + local conv2d with no padding on the haloed block;
// backward = local conv2d_backward (weight/bias gradients are this rank's partial sums,
//            see sync_domain_gradients) + ConvHalo::backward (the exchange's adjoint, which
//            sends the halo part of the input gradient to the owners and adds it there).
//
// The tensor-parallel ColumnParallelConv2d / RowParallelConv2d (tp/conv2d.hpp) take the
// same halo step (use_domain_halo) for a conv that is both channel- and domain-split.
//
// weight [out, in, kh, kw] and bias [out] are full (replicated over the domain) and
// named "weight"/"bias" like nn::Conv2d, with its initialisation (kaiming_uniform(a = √5),
// uniform(±1/√fan_in)), so checkpoints and plans see the same parameters.

#include <cstdint>
#include <string>

#include "tessera/domain/conv_halo.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::domain {

struct DomainConv2dOptions {
  int dilation_h = 1, dilation_w = 1;
  LonPadding lon_padding = LonPadding::periodic;
  PolePolicy pole = PolePolicy::zero;
  bool bias = true;
  DType dtype = DType::f32;
  Device device = Device::host();  // where the parameters live (inputs must live there too)
  // Per latitude edge, overriding `pole` (ConvHaloOptions): periodic, zero, replicate,
  // mirror_even, mirror_odd (a wall). Last, so positional initialisers stay valid.
  EdgePolicy north = EdgePolicy::from_spec, south = EdgePolicy::from_spec;
};

class DomainConv2d : public nn::Module {
 public:
  // Collective over the decomposition's communicator (plans the halo exchange). Throws
  // InvalidArgument when a rank's extent is smaller than the halo it must send.
  DomainConv2d(const Decomposition& decomposition, std::int64_t in_channels, std::int64_t out_channels,
               int kernel_h, int kernel_w, DomainConv2dOptions options = {});

  // x [N, in, local_lat, local_lon] -> [N, out, local_lat, local_lon]. Collective.
  Tensor forward(const Tensor& input) override;
  // Accumulates the local partial weight/bias gradients; returns dx [N, in, local_lat,
  // local_lon] (complete: halo contributions of the other ranks are added). Collective.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "DomainConv2d"; }
  void visit_activations(nn::ActivationVisitor& v) override { v.tensor(padded_input_); }  // the halo step keeps nothing
  std::string describe() const;

  const HaloExchange& halo() const { return halo_.exchange(); }
  const DomainConv2dOptions& options() const { return options_; }

  Parameter weight, bias;  // bias.value is undefined without bias

 private:
  std::int64_t in_channels_, out_channels_;
  int kernel_h_, kernel_w_;
  DomainConv2dOptions options_;
  ConvHalo halo_;
  Tensor padded_input_;  // cached by forward for backward
};

}  // namespace tessera::domain
