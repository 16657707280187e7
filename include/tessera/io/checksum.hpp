#pragma once
// The checkpoint checksum: a position-keyed sum of element hashes, so that any set of
// blocks that tiles a tensor (the slices of any layout, or the hyperslabs of any
// reader) adds up to the checksum of the whole tensor. docs/checkpoint-format.md gives
// the definition; tests/python re-computes it with numpy.
//
//   mix64(z)      = splitmix64's finaliser
//   key(i)        = mix64(i + 0x9e3779b97f4a7c15)        i: global C-order flat index
//   hash(i, bits) = mix64(key(i) xor bits)                bits: the element's stored bit
//                                                         pattern, zero-extended to 64 bits
//   checksum      = sum over all elements of hash(i, bits_i)  (mod 2^64)
//
// mix64 is a bijection, so changing any single element always changes the checksum;
// keying by position also catches moved or swapped blocks.

#include <cstddef>
#include <cstdint>

#include "tessera/tensor.hpp"

namespace tessera::io {

inline constexpr const char* checksum_algorithm = "tessera-hashsum64-v1";

constexpr std::uint64_t checksum_mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t checksum_element(std::uint64_t global_index, std::uint64_t bits) noexcept {
  return checksum_mix64(checksum_mix64(global_index + 0x9e3779b97f4a7c15ULL) ^ bits);
}

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF: the iSCSI / ext4 / Btrfs checksum) of `bytes` bytes, continuing from the
// CRC of the bytes before them (`crc` = 0 for the first piece), so a file can be
// checksummed piece by piece. The SSE4.2 instruction computes it where the CPU has one,
// a table otherwise; both give the same value. The checkpoint MANIFEST records one per
// file (docs/checkpoint-format.md).
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0) noexcept;

// The contribution of `block` (a host tensor, any strides) that sits at `offset` in a
// tensor of `global_shape`. Throws ShapeError when the block lies outside it.
std::uint64_t block_checksum(const Tensor& block, const Shape& global_shape, const Shape& offset);

}  // namespace tessera::io
