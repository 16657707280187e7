#include "tessera/io/checksum.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "tessera/detail/checked_math.hpp"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint checksum hashes little-endian bit patterns");

namespace {

// ---- v1: one 64-bit hash per element.
template <class Bits>
std::uint64_t row_sum_v1(const unsigned char* p, std::int64_t n, std::uint64_t base) {
  std::uint64_t sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    Bits bits;
    std::memcpy(&bits, p + static_cast<std::size_t>(j) * sizeof(Bits), sizeof(Bits));
    sum += checksum_element(base + static_cast<std::uint64_t>(j), bits);
  }
  return sum;
}

// ---- v2: one 32-bit hash per 32-bit word (checksum.hpp has the definition).
// GCC at -O2 vectorises only with the dynamic cost model (the very-cheap default refuses
// loops with a run-time trip count split), and the clones let one portable build use
// AVX2's and AVX-512's 32-bit multiplies where the CPU has them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_CHECKSUM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_CHECKSUM_CLONES
#endif

constexpr std::uint32_t kKeyLow = 0x9e3779b1u, kKeyHigh = 0x85ebca77u, kKeyAdd = 0x165667b1u;

constexpr std::uint32_t word_key(std::uint64_t j) noexcept {
  return static_cast<std::uint32_t>(j) * kKeyLow + static_cast<std::uint32_t>(j >> 32) * kKeyHigh + kKeyAdd;
}

[[gnu::always_inline]] inline std::uint32_t fmix32(std::uint32_t z) noexcept {
  z ^= z >> 16;
  z *= 0x85ebca6bu;
  z ^= z >> 13;
  z *= 0xc2b2ae35u;
  return z ^ (z >> 16);
}

// Words w[0..n) at word indices first, first + 1, ..., all with the same hi32 (the
// caller splits runs there), so key(first + t) = key(first) + t * kKeyLow.
TESSERA_CHECKSUM_CLONES std::uint64_t words_u32(const std::uint32_t* w, std::int64_t n, std::uint32_t key0) {
  std::uint64_t sum = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    sum += fmix32(w[t] ^ (key0 + static_cast<std::uint32_t>(t) * kKeyLow));
  }
  return sum;
}

TESSERA_CHECKSUM_CLONES std::uint64_t words_u16(const std::uint16_t* w, std::int64_t n, std::uint32_t key0) {
  std::uint64_t sum = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    sum += fmix32(static_cast<std::uint32_t>(w[t]) ^ (key0 + static_cast<std::uint32_t>(t) * kKeyLow));
  }
  return sum;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// `words` consecutive words of `esize`-byte units from `p`, the first at word index `j`.
std::uint64_t row_sum_v2(const unsigned char* p, std::int64_t words, std::uint64_t j, std::size_t esize) {
  std::uint64_t sum = 0;
  while (words > 0) {
    // Up to the next multiple of 2^32, where hi32(j) changes.
    const std::uint64_t to_wrap = (std::uint64_t{1} << 32) - (j & 0xffffffffu);
    const std::int64_t n = static_cast<std::int64_t>(std::min<std::uint64_t>(to_wrap, static_cast<std::uint64_t>(words)));
    if (esize == 2) {
      // A 2-byte element's bits in a word of its own.
      std::uint16_t chunk[1024];
      for (std::int64_t done = 0; done < n; done += 1024) {
        const std::int64_t m = std::min<std::int64_t>(1024, n - done);
        std::memcpy(chunk, p + 2 * done, static_cast<std::size_t>(2 * m));
        sum += words_u16(chunk, m, word_key(j + static_cast<std::uint64_t>(done)));
      }
      p += 2 * n;
    } else if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::uint32_t) == 0) {
      sum += words_u32(reinterpret_cast<const std::uint32_t*>(p), n, word_key(j));
      p += 4 * n;
    } else {
      std::uint32_t chunk[1024];  // an unaligned block (a user's buffer): copied to alignment
      for (std::int64_t done = 0; done < n; done += 1024) {
        const std::int64_t m = std::min<std::int64_t>(1024, n - done);
        std::memcpy(chunk, p + 4 * done, static_cast<std::size_t>(4 * m));
        sum += words_u32(chunk, m, word_key(j + static_cast<std::uint64_t>(done)));
      }
      p += 4 * n;
    }
    words -= n;
    j += static_cast<std::uint64_t>(n);
  }
  return sum;
}

}  // namespace

std::string_view checksum_algorithm_name(ChecksumAlgorithm algorithm) noexcept {
  return algorithm == ChecksumAlgorithm::hashsum64_v1 ? "tessera-hashsum64-v1" : "tessera-hashsum64-v2";
}

ChecksumAlgorithm parse_checksum_algorithm(std::string_view name, const std::string& file) {
  for (ChecksumAlgorithm a : {ChecksumAlgorithm::hashsum64_v1, ChecksumAlgorithm::hashsum64_v2}) {
    if (name == checksum_algorithm_name(a)) return a;
  }
  throw IoError("checkpoint: '" + file + "' names checksum algorithm '" + std::string(name) +
                "'; this tessera knows tessera-hashsum64-v1 and tessera-hashsum64-v2");
}

std::uint64_t block_checksum_range(const Tensor& block, const Shape& global_shape, const Shape& offset,
                                   std::int64_t first, std::int64_t count, ChecksumAlgorithm algorithm) {
  const int rank = block.dim();
  if (static_cast<int>(global_shape.size()) != rank || static_cast<int>(offset.size()) != rank) {
    throw ShapeError("block_checksum: block " + block.str() + ", offset " + shape_str(offset) +
                     " and global shape " + shape_str(global_shape) + " differ in rank");
  }
  // The global element count is the hash's index space: it must be countable (a C or
  // Fortran caller's global shape can be anything).
  (void)tessera::detail::checked_numel(global_shape, "block_checksum: global shape");
  for (int d = 0; d < rank; ++d) {
    // offset + extent compared without the sum, which could overflow for a huge offset.
    if (offset[d] < 0 || offset[d] > global_shape[d] || block.shape()[d] > global_shape[d] - offset[d]) {
      throw ShapeError("block_checksum: block " + block.str() + " at offset " + shape_str(offset) +
                       " lies outside global shape " + shape_str(global_shape));
    }
  }
  if (first < 0 || count < 0 || first > block.numel() || count > block.numel() - first) {
    throw ShapeError("block_checksum: elements [" + std::to_string(first) + ", +" + std::to_string(count) +
                     ") lie outside block " + block.str());
  }
  if (count == 0) return 0;
  const Tensor host = block.to(Device::host()).contiguous();  // no copy for a contiguous host tensor
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  const std::size_t esize = host.element_size();
  if (esize != 2 && esize != 4 && esize != 8) throw InternalError("block_checksum: element size " + std::to_string(esize));
  const Shape global_strides = contiguous_strides(global_shape);
  const std::int64_t row = rank == 0 ? 1 : block.shape()[rank - 1];

  // The block index of the row holding element `first` (last dim 0), and its column.
  Shape index(static_cast<std::size_t>(rank), 0);
  std::int64_t rest = first / row;
  for (int d = rank - 2; d >= 0; --d) {
    index[d] = rest % block.shape()[d];
    rest /= block.shape()[d];
  }
  std::int64_t column = first % row;
  std::uint64_t sum = 0;
  const unsigned char* p = bytes + static_cast<std::size_t>(first) * esize;
  while (count > 0) {
    const std::int64_t n = std::min(row - column, count);
    std::uint64_t base = static_cast<std::uint64_t>(column);
    for (int d = 0; d < rank; ++d) base += static_cast<std::uint64_t>((offset[d] + index[d]) * global_strides[d]);
    if (algorithm == ChecksumAlgorithm::hashsum64_v2) {
      const std::uint64_t words_per_element = esize == 8 ? 2 : 1;
      sum += row_sum_v2(p, n * static_cast<std::int64_t>(words_per_element), base * words_per_element, esize);
    } else {
      switch (esize) {  // fixed widths let the compiler unroll the hot loop
        case 2: sum += row_sum_v1<std::uint16_t>(p, n, base); break;
        case 4: sum += row_sum_v1<std::uint32_t>(p, n, base); break;
        default: sum += row_sum_v1<std::uint64_t>(p, n, base); break;
      }
    }
    p += static_cast<std::size_t>(n) * esize;
    count -= n;
    column = 0;
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < block.shape()[d]) break;
      index[d] = 0;
    }
  }
  return sum;
}

std::uint64_t block_checksum(const Tensor& block, const Shape& global_shape, const Shape& offset,
                             ChecksumAlgorithm algorithm) {
  return block_checksum_range(block, global_shape, offset, 0, block.numel(), algorithm);
}

}  // namespace tessera::io
