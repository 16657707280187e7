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

// Multiplication in GF(2)[x] mod the polynomial, in the reflected representation the
// register uses (bit 31 is the coefficient of x^0, bit 0 that of x^31). Running the
// register over n zero bytes multiplies it by x^(8n); that is how independently computed
// pieces are joined: crc(s, A || B) = crc(s, A) * x^(8|B|) + crc(0, B).
std::uint32_t multiply_mod(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
    if (b & bit) product ^= a;
    a = (a & 1u) ? (a >> 1) ^ kPolynomial : a >> 1;
  }
  return product;
}

// x^(8 n) mod the polynomial.
std::uint32_t x_to_8n(std::uint64_t n) noexcept {
  std::uint32_t result = 0x80000000u, square = 0x00800000u;  // x^0, and x^8
  for (; n > 0; n >>= 1) {
    if (n & 1u) result = multiply_mod(result, square);
    square = multiply_mod(square, square);
  }
  return result;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CRC32C_SSE42 1
// One crc32 instruction takes 3 cycles but a new one can start every cycle, so three
// independent streams over thirds of a block run about three times as fast as one chain
// (12 GB/s on the development machine, about its memory bandwidth, against ~7); the
// thirds are joined with multiply_mod.
constexpr std::size_t kStream = 8192;  // bytes per stream and block

__attribute__((target("sse4.2"))) std::uint64_t crc_chain(const unsigned char* p, std::size_t n,
                                                           std::uint64_t c) noexcept {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto s = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) s = __builtin_ia32_crc32qi(s, *p);
  return s;
}

__attribute__((target("sse4.2"))) std::uint32_t crc_sse42(const unsigned char* p, std::size_t n,
                                                           std::uint32_t state) noexcept {
  static const std::uint32_t shift_one_stream = x_to_8n(kStream);
  std::uint64_t c = state;
  for (; n >= 3 * kStream; n -= 3 * kStream, p += 3 * kStream) {
    std::uint64_t a = c, b = 0, d = 0;
    for (std::size_t k = 0; k < kStream; k += 8) {
      std::uint64_t wa, wb, wd;
      std::memcpy(&wa, p + k, 8);
      std::memcpy(&wb, p + kStream + k, 8);
      std::memcpy(&wd, p + 2 * kStream + k, 8);
      a = __builtin_ia32_crc32di(a, wa);
      b = __builtin_ia32_crc32di(b, wb);
      d = __builtin_ia32_crc32di(d, wd);
    }
    c = multiply_mod(static_cast<std::uint32_t>(a), shift_one_stream) ^ static_cast<std::uint32_t>(b);
    c = multiply_mod(static_cast<std::uint32_t>(c), shift_one_stream) ^ static_cast<std::uint32_t>(d);
  }
  return static_cast<std::uint32_t>(crc_chain(p, n, c));
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

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) noexcept {
  // With finished CRCs (initial value and final xor ~0) the ~0 terms cancel:
  // crc(A || B) = crc(A) * x^(8|B|) + crc(B).
  // Pieces of one length follow each other (the rows of a sharded block): keep the last shift.
  thread_local std::uint64_t last_bytes = 0;
  thread_local std::uint32_t last_shift = 0x80000000u;  // x^0
  if (bytes_b != last_bytes) {
    last_shift = x_to_8n(bytes_b);
    last_bytes = bytes_b;
  }
  return multiply_mod(crc_a, last_shift) ^ crc_b;
}

}  // namespace tessera::io
