#pragma once
// Element types a Tensor can hold.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/bfloat16.hpp"

namespace tessera {

enum class DType : std::uint8_t { f32, f64, bf16, i64 };

std::size_t dtype_size(DType dtype) noexcept;
std::string_view dtype_name(DType dtype) noexcept;  // "f32", "f64", "bf16", "i64"
// Parses a dtype name; throws InvalidArgument naming `what` and the bad text.
DType parse_dtype(std::string_view name, std::string_view what = "dtype");
bool is_floating(DType dtype) noexcept;

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::i64; };

template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace tessera
