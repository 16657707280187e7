#include "tessera/precision.hpp"

#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

constexpr tessera::detail::EnumName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"},
    {Precision::bf16_mixed, "bf16-mixed"},
};

std::string_view precision_name(Precision precision) noexcept {
  return tessera::detail::name_of(kPrecisionNames, precision);
}

Precision parse_precision(std::string_view name, std::string_view what) {
  return tessera::detail::parse_enum(kPrecisionNames, name, what, "precision");
}

}  // namespace tessera
