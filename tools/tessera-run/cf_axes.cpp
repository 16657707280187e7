#include "cf_axes.hpp"

#include <cmath>

namespace tessera::run {

const char* number_type_name(NumberType type) {
  switch (type) {
    case NumberType::i8: return "int8";
    case NumberType::u8: return "uint8";
    case NumberType::i16: return "int16";
    case NumberType::u16: return "uint16";
    case NumberType::i32: return "int32";
    case NumberType::u32: return "uint32";
    case NumberType::i64: return "int64";
    case NumberType::u64: return "uint64";
    case NumberType::f32: return "float32";
    case NumberType::f64: return "float64";
  }
  return "?";
}

bool holds_exactly(NumberType type, const std::vector<double>& values) {
  // [low, high) of each integer type, as doubles (2^63 and 2^64 are exact in double).
  double low = 0, high = 0;
  switch (type) {
    case NumberType::f64: return true;
    case NumberType::f32:
      for (double v : values) {
        if (!(static_cast<double>(static_cast<float>(v)) == v) && !std::isnan(v)) return false;
      }
      return true;
    case NumberType::i8: low = -128.0, high = 128.0; break;
    case NumberType::u8: high = 256.0; break;
    case NumberType::i16: low = -32768.0, high = 32768.0; break;
    case NumberType::u16: high = 65536.0; break;
    case NumberType::i32: low = -2147483648.0, high = 2147483648.0; break;
    case NumberType::u32: high = 4294967296.0; break;
    case NumberType::i64: low = -std::ldexp(1.0, 63), high = std::ldexp(1.0, 63); break;
    case NumberType::u64: high = std::ldexp(1.0, 64); break;
  }
  for (double v : values) {
    if (!std::isfinite(v) || v != std::trunc(v) || v < low || v >= high) return false;
  }
  return true;
}

}  // namespace tessera::run
