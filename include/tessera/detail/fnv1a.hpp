#pragma once
// FNV-1a, 64 bits: the one string hash of tessera. Initialisation keys its random
// streams by a parameter's name with it (init.hpp's name_key), and the collective
// consistency check compares descriptions by it (agree.hpp).

#include <cstdint>
#include <string_view>

namespace tessera::detail {

constexpr std::uint64_t fnv1a64(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV 64-bit prime
  }
  return h;
}

}  // namespace tessera::detail
