#pragma once
// Private: the small JSON reader and string quoting the safetensors header needs. A
// safetensors header is one JSON object of objects, strings and integer arrays; a
// parser of our own keeps tessera free of one more build dependency for it. It accepts
// RFC 8259 JSON (objects, arrays, strings with every escape, numbers, true, false,
// null), keeps numbers as their text (offsets are exact 64-bit integers, which a double
// would round), keeps object members in file order, and rejects a key given twice.
//
// The text may be hostile (a file from anywhere): nesting is limited, every error is an
// IoError naming `source` and the byte offset, and nothing is read past the text.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::io::detail {

struct JsonMember;

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;                                          // a string's value, a number's digits
  std::vector<JsonValue> items;                              // array
  // Object members, in file order. A struct of its own rather than std::pair: clang with
  // libstdc++ instantiates pair<string, JsonValue> while JsonValue is still incomplete.
  std::vector<JsonMember> members;

  const JsonValue* member(std::string_view key) const;       // nullptr when absent
  std::string_view kind_name() const noexcept;               // "object", "string", ...
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

// Parses one JSON value; trailing whitespace is allowed, anything else after it is not.
// IoError "<source>: invalid JSON at byte N: <why>".
JsonValue parse_json(std::string_view text, std::string_view source);

// A number's text as an unsigned 64-bit integer; false when it is negative, fractional,
// has an exponent or does not fit.
bool json_uint64(const JsonValue& value, std::uint64_t& out);

// `s` as a JSON string literal, quotes included: `"` and `\` escaped, control
// characters as \u00XX, every other byte (UTF-8 included) as it is.
std::string json_quote(std::string_view s);

}  // namespace tessera::io::detail
