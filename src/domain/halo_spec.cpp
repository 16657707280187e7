// What a HaloSpec says, in words: the names of the pole and edge policies and the
// one-line descriptions of a spec and its widths that error messages and the plan's
// cross-rank agreement quote. (Whether a spec is valid on a decomposition is the
// planner's question: halo::validate_spec in halo_planner.cpp.)

#include <string>
#include <utility>

#include "domain/halo_plan.hpp"
#include "tessera/domain/halo_exchange.hpp"

namespace tessera::domain {

std::string_view pole_policy_name(PolePolicy policy) noexcept {
  switch (policy) {
    case PolePolicy::zero: return "zero";
    case PolePolicy::replicate: return "replicate";
    case PolePolicy::across_pole: return "across_pole";
    case PolePolicy::across_pole_point: return "across_pole_point";
  }
  return "?";
}

std::string_view edge_policy_name(EdgePolicy policy) noexcept {
  switch (policy) {
    case EdgePolicy::from_spec: return "from_spec";
    case EdgePolicy::periodic: return "periodic";
    case EdgePolicy::zero: return "zero";
    case EdgePolicy::none: return "none";
    case EdgePolicy::replicate: return "replicate";
    case EdgePolicy::mirror_even: return "mirror_even";
    case EdgePolicy::mirror_odd: return "mirror_odd";
  }
  return "?";
}

std::string HaloSpec::str() const {
  std::string s = "pole " + std::string(pole_policy_name(pole)) + (periodic_lon ? ", periodic lon" : ", bounded lon");
  const std::pair<const char*, EdgePolicy> edges[] = {{"north", north}, {"south", south}, {"west", west}, {"east", east}};
  for (const auto& [name, policy] : edges) {
    if (policy != EdgePolicy::from_spec) s += std::string(", ") + name + " " + std::string(edge_policy_name(policy));
  }
  return s;
}

std::string HaloWidths::str() const {
  return "lat " + std::to_string(lat_before) + "+" + std::to_string(lat_after) + ", lon " +
         std::to_string(lon_before) + "+" + std::to_string(lon_after);
}

namespace halo {

bool has_edge(const HaloSpec& spec, EdgePolicy policy) {
  for (EdgePolicy e : {spec.north, spec.south, spec.west, spec.east}) {
    if (e == policy) return true;
  }
  return false;
}

}  // namespace halo

}  // namespace tessera::domain
