#pragma once
// Overflow-checked size arithmetic: the one place where extents, strides, element counts
// and byte counts are multiplied and added. A size that does not fit is an error naming
// who computed it and the values, never a wrapped count (a wrapped element count becomes
// a too-small allocation or an accepted view, and then an out-of-bounds write).
//
// try_mul / try_add return std::nullopt instead of throwing, for callers whose error is
// not a ShapeError (a parallelism config names its keys in a ConfigError).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tessera/error.hpp"

namespace tessera::detail {

// a * b and a + b in T when the exact result fits in T.
template <std::integral T>
constexpr std::optional<T> try_mul(T a, T b) noexcept {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <std::integral T>
constexpr std::optional<T> try_add(T a, T b) noexcept {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// "[2, 3, 4]" (shape_str of tensor.hpp is this).
inline std::string extents_str(std::span<const std::int64_t> extents) {
  std::string s = "[";
  for (std::size_t d = 0; d < extents.size(); ++d) s += (d ? ", " : "") + std::to_string(extents[d]);
  return s + "]";
}

// The throwing forms: ShapeError "<who>: a * b overflows int64 (...)".
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view who) {
  if (const auto r = try_mul(a, b)) return *r;
  throw ShapeError(std::string(who) + ": " + std::to_string(a) + " * " + std::to_string(b) +
                   " overflows int64 (the size is too large to address)");
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view who) {
  if (const auto r = try_add(a, b)) return *r;
  throw ShapeError(std::string(who) + ": " + std::to_string(a) + " + " + std::to_string(b) +
                   " overflows int64 (the size is too large to address)");
}

// The element count of `shape`: ShapeError naming `who` and the shape for a negative
// extent, or for a product that does not fit in int64. Any zero extent makes it 0,
// whatever the other extents are.
inline std::int64_t checked_numel(std::span<const std::int64_t> shape, std::string_view who) {
  bool empty = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw ShapeError(std::string(who) + ": shape " + extents_str(shape) + " has a negative extent in dim " +
                       std::to_string(d));
    }
    empty = empty || shape[d] == 0;
  }
  if (empty) return 0;
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    const auto next = try_mul(n, e);
    if (!next) {
      throw ShapeError(std::string(who) + ": shape " + extents_str(shape) +
                       " has more elements than int64 can count");
    }
    n = *next;
  }
  return n;
}

// `count` elements of `element_size` bytes, as a byte count that also fits in int64
// (pointer offsets are signed).
inline std::size_t checked_bytes(std::int64_t count, std::size_t element_size, std::string_view who) {
  const auto bytes = count < 0 ? std::nullopt : try_mul(count, static_cast<std::int64_t>(element_size));
  if (!bytes) {
    throw ShapeError(std::string(who) + ": " + std::to_string(count) + " elements of " +
                     std::to_string(element_size) + " bytes do not fit in the address space");
  }
  return static_cast<std::size_t>(*bytes);
}

}  // namespace tessera::detail
