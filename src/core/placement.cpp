#include "tessera/placement.hpp"

#include <algorithm>

#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

constexpr tessera::detail::EnumName<MeshDim> kMeshDimNames[] = {
    {MeshDim::dp, "dp"},
    {MeshDim::tp, "tp"},
    {MeshDim::domain, "domain"},
};

std::string_view mesh_dim_name(MeshDim dim) noexcept { return tessera::detail::name_of(kMeshDimNames, dim); }

std::string Placement::str() const {
  return is_replicate() ? "Replicate" : "Shard(" + std::to_string(dim) + ")";
}

Placement Placement::parse(std::string_view text, std::string_view what) {
  if (text == "Replicate") return replicate();
  if (text.size() > 7 && text.substr(0, 6) == "Shard(" && text.back() == ')') {
    const std::string_view digits = text.substr(6, text.size() - 7);
    int dim = 0;
    bool ok = !digits.empty();
    // Stops at the first bad character or a value over 63, so a long digit string
    // cannot overflow `dim` (found by fuzz_capi_shapes).
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9' && dim < 64;
      if (!ok) break;
      dim = dim * 10 + (c - '0');
    }
    ok = ok && dim < 64;
    if (ok) return shard(dim);
  }
  throw InvalidArgument(std::string(what) + ": cannot parse placement '" + std::string(text) +
                        "' (expected Replicate or Shard(<dim>))");
}

std::string MeshPlacement::str() const {
  return "dp: " + dp.str() + ", tp: " + tp.str() + ", domain: " + domain.str();
}

ShardRange shard_range(std::int64_t global, int parts, int index) {
  if (parts < 1 || index < 0 || index >= parts || global < 0) {
    throw InvalidArgument("shard_range: cannot take part " + std::to_string(index) + " of " +
                          std::to_string(parts) + " of an extent of " + std::to_string(global));
  }
  const std::int64_t base = global / parts;
  const std::int64_t extra = global % parts;
  const std::int64_t start = index * base + std::min<std::int64_t>(index, extra);
  return {start, base + (index < extra ? 1 : 0)};
}

}  // namespace tessera
