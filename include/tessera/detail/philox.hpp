#pragma once
// Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), written from the paper's
// description. A counter-based generator is a pure function output = f(counter, key):
// no state, so any element of a parameter can be drawn independently of every other,
// which is what lets each rank initialise only its own shard (init.hpp).
//
// One round maps the counter (c0, c1, c2, c3) with the key (k0, k1) to
//   (hi(M1*c2) ^ c1 ^ k0,  lo(M1*c2),  hi(M0*c0) ^ c3 ^ k1,  lo(M0*c0))
// with the 64-bit products of the multipliers M0, M1; between rounds the key is bumped
// by the Weyl constants W0, W1. Ten rounds is the paper's recommended (Crush-resistant
// with margin) variant; tests check Random123's published known-answer vectors.
//
// Inline and host/device so a CUDA initialisation kernel runs exactly this code.

#include <cstdint>

#include "tessera/detail/host_device.hpp"

namespace tessera::detail {

struct Philox4x32 {
  std::uint32_t v[4];
};

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

// Philox-4x32 with `rounds` rounds (10 is the standard variant).
TESSERA_HOST_DEVICE inline Philox4x32 philox4x32(Philox4x32 ctr, std::uint32_t k0, std::uint32_t k1,
                                                 int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * ctr.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * ctr.v[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The splitmix64 finaliser: a bijective 64-bit mixer with full avalanche.
TESSERA_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The 64-bit Philox key of one parameter's stream. Both halves go through the mixer,
// in an order-dependent way, so (seed, name) and (name, seed) or nearby seeds give
// unrelated keys; distinct streams collide only by a 64-bit hash collision.
TESSERA_HOST_DEVICE inline std::uint64_t philox_stream_key(std::uint64_t seed, std::uint64_t name_hash) {
  return mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ name_hash);
}

// Counter-block of element `index` of the stream `key`; `draw` numbers further blocks
// of the same element (used when one element needs more than four 32-bit words).
TESSERA_HOST_DEVICE inline Philox4x32 philox_element_block(std::uint64_t key, std::uint64_t index,
                                                           std::uint32_t draw = 0) {
  const Philox4x32 ctr{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), draw, 0u}};
  return philox4x32(ctr, static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
}

// A double in [0, 1) with 53 random bits from two 32-bit words (27 + 26 bits).
TESSERA_HOST_DEVICE inline double uniform53(std::uint32_t a, std::uint32_t b) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(a >> 5) << 26) | (b >> 6);
  return static_cast<double>(bits) * 0x1.0p-53;
}

// A double in (0, 1): the midpoint of the same 53-bit cell, never 0 (log-safe) and never 1.
TESSERA_HOST_DEVICE inline double uniform53_open(std::uint32_t a, std::uint32_t b) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(a >> 5) << 26) | (b >> 6);
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}

}  // namespace tessera::detail
