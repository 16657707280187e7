#pragma once
// Rotary position embeddings' math (Compute::rope), as host/device inline functions with
// no vendor header: the host loop and the CUDA kernel rotate with exactly these.
//
// Pairing: interleaved, as in the original Llama code (a head's features (2i, 2i+1) are
// the real and imaginary parts of one complex number, multiplied by e^{i s w_i}); the
// half-split variant pairs (i, i + head_dim/2) instead and differs by a fixed permutation
// of q's and k's output features.

#include <cmath>
#include <cstdint>

#include "tessera/detail/host_device.hpp"

namespace tessera::detail {

// The angle of pair `pair` (0 <= pair < head_dim / 2) at sequence position `position`:
// position * theta^(-2 pair / head_dim).
TESSERA_HOST_DEVICE inline double rope_angle(std::int64_t position, std::int64_t pair, std::int64_t head_dim,
                                             double theta) {
  const double exponent = -2.0 * static_cast<double>(pair) / static_cast<double>(head_dim);
  return static_cast<double>(position) * pow(theta, exponent);
}

// (x0, x1) rotated by `angle` (by -angle with `inverse`), in double.
TESSERA_HOST_DEVICE inline void rope_rotate(double x0, double x1, double angle, bool inverse, double& y0,
                                            double& y1) {
  const double c = cos(angle);
  const double s = inverse ? -sin(angle) : sin(angle);
  y0 = x0 * c - x1 * s;
  y1 = x0 * s + x1 * c;
}

}  // namespace tessera::detail
