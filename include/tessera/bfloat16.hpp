#pragma once
// bfloat16 storage type: the upper 16 bits of an IEEE float. Arithmetic happens in
// float; conversion rounds to nearest even (as cuBLAS and PyTorch do), NaN stays NaN.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tessera/detail/host_device.hpp"

namespace tessera {

struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  TESSERA_HOST_DEVICE explicit bfloat16(float value) : bits(round_to_bits(value)) {}
  TESSERA_HOST_DEVICE explicit operator float() const { return to_float(bits); }

  static TESSERA_HOST_DEVICE bfloat16 from_bits(std::uint16_t raw) {
    bfloat16 b;
    b.bits = raw;
    return b;
  }

  static TESSERA_HOST_DEVICE std::uint16_t round_to_bits(float value) {
    std::uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    }
    const std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
  }

  static TESSERA_HOST_DEVICE float to_float(std::uint16_t raw) {
    const std::uint32_t u = static_cast<std::uint32_t>(raw) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

static_assert(sizeof(bfloat16) == 2, "bfloat16 must be two bytes");

// v rounded once to T (float or double), or through float for bfloat16 (as the bfloat16
// constructor rounds): the one rule by which every backend stores a value computed in
// double.
template <class T>
TESSERA_HOST_DEVICE inline T round_from_double(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace tessera
