#pragma once
// ConvHalo: the halo step of a convolution over a domain-decomposed (B, C, lat, lon)
// field, shared by every layer that convolves such a field (DomainConv2d, and the
// tensor-parallel ColumnParallelConv2d / RowParallelConv2d once given a domain halo).
//
// A convolution's zero padding becomes, on a split field, the neighbours' rows and
// columns: pad() copies the local block into a haloed buffer and fills the halo
// (HaloExchange::exchange: from the owners, zero or periodic in longitude, by the pole
// policy beyond the true poles); the layer then convolves the haloed block with no
// padding. backward() is the adjoint: HaloExchange::exchange_adjoint sends the halo part
// of the input gradient to its owners and adds it there, and the interior is returned.
//
// A strided convolution keeps its output on the decomposition's process grid only when
// every rank's extent along a strided axis is a multiple of the stride: rank blocks then
// start on a stride boundary, the local output is the block's extent / stride, and the
// output field is split as the (lat / stride, lon / stride) grid over the same process
// grid. The constructor checks this for every rank (so all ranks throw together).

#include <cstdint>
#include <string>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

enum class LonPadding { zero, periodic };

// What lies beyond the global field's edges.
struct ConvHaloOptions {
  LonPadding lon_padding = LonPadding::periodic;
  PolePolicy pole = PolePolicy::zero;
  // Per latitude edge (north: row 0's side), overriding `pole` (HaloSpec's edge
  // policies): periodic (a channel or doubly periodic domain), zero, replicate,
  // mirror_even, mirror_odd. `none` is refused: the halo is a fresh buffer, so an edge
  // left alone would convolve stale memory.
  EdgePolicy north = EdgePolicy::from_spec, south = EdgePolicy::from_spec;
};

// The halo of a "same" convolution (output grid = input grid): the dilated kernel's
// reach d*(k-1) per axis, split as before = d*(k-1) / 2, after = d*(k-1) - before
// (PyTorch's padding='same' split; odd extents are symmetric, even ones put the extra
// row/column after).
HaloWidths same_conv_halo(int kernel_h, int kernel_w, int dilation_h, int dilation_w);

class ConvHalo {
 public:
  // Collective over the decomposition's communicator (plans the exchange). `layer` names
  // the owning layer in every error. Throws InvalidArgument when a rank's extent is not
  // a multiple of its axis's stride, or is smaller than the halo it must send.
  ConvHalo(const Decomposition& decomposition, HaloWidths width, ConvHaloOptions options, std::string layer,
           int stride_h = 1, int stride_w = 1);

  // x [N, channels, local_lat, local_lon] of `dtype` on `device` -> the haloed block
  // [N, channels, halo + local_lat + halo, halo + local_lon + halo]. Collective. An input
  // of the wrong shape on any rank throws a ShapeError naming that rank on every rank
  // (checked collectively whenever the input shape changes, so uneven splits cannot
  // strand the other ranks in the exchange).
  Tensor pad(const Tensor& x, std::int64_t channels, DType dtype, Device device);
  // The adjoint of pad: folds the haloed gradient (consumed: its halo is zeroed) onto the
  // local block's owners and returns this rank's [N, channels, local_lat, local_lon].
  Tensor backward(Tensor grad_padded);

  const HaloExchange& exchange() const { return halo_; }
  const Decomposition& decomposition() const { return halo_.decomposition(); }
  const ConvHaloOptions& options() const { return options_; }

 private:
  ConvHaloOptions options_;
  std::string layer_;
  HaloExchange halo_;
  Shape agreed_input_shape_;  // the input shape last validated collectively
};

}  // namespace tessera::domain
