#include "tessera/dtype.hpp"

#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr tessera::detail::EnumName<DType> kDtypeNames[] = {
    {DType::f32, "f32"},
    {DType::f64, "f64"},
    {DType::bf16, "bf16"},
    {DType::i64, "i64"},
};

std::string_view dtype_name(DType dtype) noexcept { return tessera::detail::name_of(kDtypeNames, dtype); }

DType parse_dtype(std::string_view name, std::string_view what) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
    if (name == dtype_name(d)) return d;
  }
  throw InvalidArgument(std::string(what) + ": unknown dtype '" + std::string(name) +
                        "' (expected f32, f64, bf16 or i64)");
}

bool is_floating(DType dtype) noexcept { return dtype != DType::i64; }

}  // namespace tessera
