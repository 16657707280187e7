#include "tessera/precision.hpp"

#include "tessera/error.hpp"

namespace tessera {

std::string_view precision_name(Precision precision) noexcept {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::bf16_mixed: return "bf16-mixed";
  }
  return "?";
}

Precision parse_precision(std::string_view name, std::string_view what) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    if (name == precision_name(p)) return p;
  }
  throw InvalidArgument(std::string(what) + ": unknown precision '" + std::string(name) +
                        "' (expected fp32 or bf16-mixed)");
}

}  // namespace tessera
