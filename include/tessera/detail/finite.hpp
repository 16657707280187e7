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

// How many values of `values` are NaN or infinite, and the first one's index (for a
// report that names them all, as `tessera-ckpt verify` does); count 0 when all are finite.
struct NonFiniteValues {
  std::size_t count = 0, first = 0;
};
template <class T>
NonFiniteValues count_non_finite(std::span<const T> values) {
  NonFiniteValues found;
  const auto first = first_non_finite(values);
  if (!first) return found;
  found.first = *first;
  for (std::size_t i = *first; i < values.size(); ++i) found.count += std::isfinite(values[i]) ? 0 : 1;
  return found;
}

// "NaN" or "an infinite value", for messages that name what was found.
inline const char* non_finite_kind(double value) { return std::isnan(value) ? "NaN" : "an infinite value"; }

}  // namespace tessera::detail
