#pragma once
// The byte decoder shared by the structured fuzz targets (fuzz_capi_shapes and the
// structured mode of fuzz_checkpoint_reader): a cursor over the input whose integer
// reads are biased towards the values that matter for sizes -- small ones, and the
// int / int64 limits -- while any 64-bit value stays reachable. Missing bytes read as 0,
// so every input decodes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

namespace tessera::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool done() const { return i_ >= n_; }
  std::uint8_t byte() { return i_ < n_ ? p_[i_++] : 0; }

  // Selector byte s: 00xxxxxx small value (x - 8, so -8..55); 01xxxxxx the next two
  // bytes (0..65535); 10xxxxxx a special value; 11xxxxxx the next eight bytes raw.
  std::int64_t i64() {
    static constexpr std::int64_t specials[] = {
        0, 1, 2, -1, -2, 3,
        std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min(),
        std::int64_t{1} << 31, (std::int64_t{1} << 32) - 1, std::int64_t{1} << 32,
        std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max() / 2, std::int64_t{1} << 62, std::int64_t{3037000500},
        std::int64_t{1} << 40, (std::int64_t{1} << 61) + 1, std::int64_t{1} << 20, 65537};
    const std::uint8_t s = byte();
    switch (s >> 6) {
      case 0: return static_cast<std::int64_t>(s & 0x3f) - 8;
      case 1: return static_cast<std::int64_t>(byte()) | (static_cast<std::int64_t>(byte()) << 8);
      case 2: return specials[(s & 0x3f) % std::size(specials)];
      default: {
        std::uint64_t v = 0;
        for (int k = 0; k < 8; ++k) v |= static_cast<std::uint64_t>(byte()) << (8 * k);
        return static_cast<std::int64_t>(v);
      }
    }
  }
  int i32() { return static_cast<int>(i64()); }  // truncation is part of the point

  // An enum argument: mostly a valid value, sometimes any int.
  int enum_value(int count) {
    const std::uint8_t s = byte();
    return s < 0xf0 ? s % count : i32();
  }
  // ndim: mostly 1..5, sometimes 0, 6..9, or any int.
  int ndim() {
    const std::uint8_t s = byte();
    if (s < 0xe0) return 1 + s % 5;
    if (s < 0xf8) return (s & 7) + 2 == 2 ? 0 : 4 + (s & 7);
    return i32();
  }
  std::string text(std::size_t max) {
    const std::size_t len = byte() % (max + 1);
    std::string s;
    for (std::size_t k = 0; k < len; ++k) s.push_back(static_cast<char>(byte()));
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_, i_ = 0;
};


}  // namespace tessera::fuzz
