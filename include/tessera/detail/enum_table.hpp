#pragma once
// One table of names per enum, read both ways: name_of (the value's name, for messages,
// files and YAML) and parse_enum (a config value back to the enum). A table keeps the
// names and the "expected ..." list of a parser's message from drifting apart, which a
// switch per name function and a loop per parser did not.
//
// A bad value is a ConfigError naming the key, the value and every allowed name
// ("pipeline.schedule: unknown pipeline schedule 'x' (expected gpipe or 1f1b)"): the
// values parsed here are what a user writes in a config, a flag or an environment
// variable, and ConfigError is what the config layer raises for its other bad values.

#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/error.hpp"

namespace tessera::detail {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

// The value's name; "?" for a value the table lacks (an integer cast to the enum).
template <class E, std::size_t N>
constexpr std::string_view name_of(const EnumName<E> (&table)[N], E value) noexcept {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

// The allowed names in table order, for a message: "a, b or c".
template <class E, std::size_t N>
std::string names_of(const EnumName<E> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The value named `text`; ConfigError "<key>: unknown <what> '<text>' (expected ...)".
template <class E, std::size_t N>
E parse_enum(const EnumName<E> (&table)[N], std::string_view text, std::string_view key, std::string_view what) {
  for (const EnumName<E>& entry : table) {
    if (entry.name == text) return entry.value;
  }
  throw ConfigError(std::string(key) + ": unknown " + std::string(what) + " '" + std::string(text) + "' (expected " +
                    names_of(table) + ")");
}

}  // namespace tessera::detail
