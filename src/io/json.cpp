#include "io/json.hpp"

#include <cstdio>

#include "tessera/error.hpp"

namespace tessera::io::detail {

namespace {

// Deeper nesting than this is refused: a safetensors header nests three levels, and a
// recursive parser must not let a crafted file exhaust the stack.
constexpr int max_depth = 64;

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw IoError(std::string(source_) + ": invalid JSON at byte " + std::to_string(pos_) + ": " + why);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  char peek() {
    if (pos_ >= text_.size()) fail("the text ends inside a value");
    return text_[pos_];
  }

  // A byte as it can be printed in a message: itself when printable ASCII, else \xNN
  // (the text may be binary garbage).
  static std::string shown(char c) {
    if (c >= 0x20 && c < 0x7F) return std::string(1, c);
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "\\x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
    return buffer;
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "', found '" + shown(text_[pos_]) + "'");
    ++pos_;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("unknown literal");
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth > max_depth) fail("nested deeper than " + std::to_string(max_depth) + " levels");
    skip_space();
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      v.kind = JsonValue::Kind::object;
      ++pos_;
      skip_space();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_space();
        if (peek() != '"') fail("expected a string key");
        std::string key = string();
        if (v.member(key) != nullptr) fail("the key \"" + key + "\" appears twice");
        skip_space();
        expect(':');
        JsonValue member = value(depth + 1);
        v.members.push_back(JsonMember{std::move(key), std::move(member)});
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::array;
      ++pos_;
      skip_space();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(value(depth + 1));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.text = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = c == 't';
      literal(v.boolean ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::number;
      v.text = number();
      return v;
    }
    fail("unexpected character '" + shown(c) + "'");
  }

  // RFC 8259 number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("a number needs digits");
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  unsigned hex4() {
    if (text_.size() - pos_ < 4) fail("a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("a \\u escape needs four hex digits");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("the text ends inside a string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("the text ends inside an escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair encodes one code point
            if (text_.substr(pos_, 2) != "\\u") fail("a high surrogate without its low half");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("a low surrogate without its high half");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape '\\" + shown(e) + "'");
      }
    }
  }

  std::string_view text_, source_;
  std::size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::member(std::string_view key) const {
  for (const auto& [name, v] : members) {
    if (name == key) return &v;
  }
  return nullptr;
}

std::string_view JsonValue::kind_name() const noexcept {
  switch (kind) {
    case Kind::null: return "null";
    case Kind::boolean: return "a boolean";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::array: return "an array";
    case Kind::object: return "an object";
  }
  return "?";
}

JsonValue parse_json(std::string_view text, std::string_view source) { return Parser(text, source).document(); }

bool json_uint64(const JsonValue& value, std::uint64_t& out) {
  if (value.kind != JsonValue::Kind::number || value.text.empty()) return false;
  std::uint64_t v = 0;
  for (const char c : value.text) {
    if (c < '0' || c > '9') return false;  // a sign, a fraction or an exponent
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace tessera::io::detail
