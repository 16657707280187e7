#pragma once
// The checkpoint checksum: a position-keyed sum of element hashes, so that any set of
// blocks that tiles a tensor (the slices of any layout, or the hyperslabs of any
// reader) adds up to the checksum of the whole tensor. That is what lets a load at
// another layout check what it read: a hash of the file's bytes (CRC-32C, xxHash) could
// not, because no rank reads a whole file's bytes in order. The MANIFEST adds a CRC-32C
// per file for damage below HDF5 (docs/checkpoint-format.md).
//
// Two algorithms, chosen by name in each checkpoint's header:
//
//   tessera-hashsum64-v2 (format version 2, written since): over 32-bit words. An element
//   of 2 or 4 bytes is one word (zero-extended), at word index j = i; one of 8 bytes is
//   two words, low then high, at j = 2i and 2i + 1 (i: global C-order flat index).
//     key(j)    = lo32(j) * 0x9e3779b1 + hi32(j) * 0x85ebca77 + 0x165667b1   (mod 2^32)
//     fmix32(z) = z ^= z >> 16; z *= 0x85ebca6b; z ^= z >> 13; z *= 0xc2b2ae35; z ^ (z >> 16)
//     checksum  = sum over all words of fmix32(word xor key(j))   (mod 2^64)
//   32-bit lanes vectorise (8 per AVX2 instruction): about 0.25 ns per f32 element
//   against v1's 3 ns, which was 42 % of a save.
//
//   tessera-hashsum64-v1 (format version 1, still read): over elements, in 64 bits.
//     key(i)        = mix64(i + 0x9e3779b97f4a7c15)        mix64: splitmix64's finaliser
//     hash(i, bits) = mix64(key(i) xor bits)                bits zero-extended to 64 bits
//     checksum      = sum over all elements of hash(i, bits_i)  (mod 2^64)
//
// mix64 and fmix32 are bijections, so changing any single element (word) always changes
// the checksum; keying by position also catches moved or swapped blocks.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/tensor.hpp"

namespace tessera::io {

enum class ChecksumAlgorithm { hashsum64_v1, hashsum64_v2 };

// What save_checkpoint writes.
inline constexpr ChecksumAlgorithm current_checksum_algorithm = ChecksumAlgorithm::hashsum64_v2;
inline constexpr const char* checksum_algorithm = "tessera-hashsum64-v2";

std::string_view checksum_algorithm_name(ChecksumAlgorithm algorithm) noexcept;
// The algorithm a checkpoint header names; IoError naming `file` for one this tessera
// does not know.
ChecksumAlgorithm parse_checksum_algorithm(std::string_view name, const std::string& file);

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
// The CRC-32C of A followed by B from crc32c(A), crc32c(B) and B's length: pieces of a
// file hashed apart (by different ranks) are joined in file order.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) noexcept;

// The contribution of `block` (a host tensor, any strides) that sits at `offset` in a
// tensor of `global_shape`. Throws ShapeError when the block lies outside it.
std::uint64_t block_checksum(const Tensor& block, const Shape& global_shape, const Shape& offset,
                             ChecksumAlgorithm algorithm = current_checksum_algorithm);
// The share of the block's elements [first, first + count) (C-order indices into the
// block) in block_checksum: the shares of ranges that tile the block add up to its
// checksum, so a writer hashes each piece while it is in cache, just before writing it.
// Throws ShapeError as block_checksum does, and for a range outside the block.
std::uint64_t block_checksum_range(const Tensor& block, const Shape& global_shape, const Shape& offset,
                                   std::int64_t first, std::int64_t count,
                                   ChecksumAlgorithm algorithm = current_checksum_algorithm);

}  // namespace tessera::io
