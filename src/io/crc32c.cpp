// CRC-32C: the SSE4.2 crc32 instruction on x86-64 CPUs that have it (chosen once at run
// time), a byte table everywhere else. The manifest's file checksums (io/manifest.cpp).
#include <array>
#include <cstring>

#include "tessera/io/checksum.hpp"

namespace tessera::io {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, reflected

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

std::uint32_t crc_table(const unsigned char* p, std::size_t n, std::uint32_t state) noexcept {
  for (std::size_t i = 0; i < n; ++i) state = kTable[(state ^ p[i]) & 0xFFu] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CRC32C_SSE42 1
__attribute__((target("sse4.2"))) std::uint32_t crc_sse42(const unsigned char* p, std::size_t n,
                                                           std::uint32_t state) noexcept {
  std::uint64_t c = state;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto s = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) s = __builtin_ia32_crc32qi(s, *p);
  return s;
}

bool have_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::uint32_t state = ~crc;  // continue from a finished CRC
#if defined(TESSERA_CRC32C_SSE42)
  if (have_sse42()) return ~crc_sse42(p, bytes, state);
#endif
  return ~crc_table(p, bytes, state);
}

}  // namespace tessera::io
