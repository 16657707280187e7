#pragma once
// The one scan for values that are not finite, and their one wording. A NaN or Inf that
// enters through data, weights or a forecast is refused where it enters, by name:
// found later it reads as divergence ("lower optimizer.lr") or silently becomes output.

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>

namespace tessera::detail {

// The index of the first value of `values` that is NaN or infinite; nullopt when all are finite.
template <class T>
std::optional<std::size_t> first_non_finite(std::span<const T> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return std::nullopt;
}

// "NaN" or "an infinite value", for messages that name what was found.
inline const char* non_finite_kind(double value) { return std::isnan(value) ? "NaN" : "an infinite value"; }

}  // namespace tessera::detail
