#pragma once
// Units: the modules data parallelism hooks. A unit is the topmost module on its path
// that registers parameters itself; it covers its whole subtree. Shared by
// DataParallel (which wraps them) and plan_memory (which predicts their transients).

#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/module.hpp"

namespace tessera::dp::detail {

struct UnitInfo {
  std::string path;  // "" for the root
  nn::Module* module = nullptr;
  std::vector<std::pair<std::string, Parameter*>> params;  // full FQNs, subtree order
};

// Pre-order: a module that registers parameters itself becomes a unit and its subtree
// is not searched further; modules without own parameters are descended into.
inline std::vector<UnitInfo> find_units(nn::Module& model) {
  std::vector<UnitInfo> units;
  auto visit = [&](auto& self, nn::Module& m, const std::string& path) -> void {
    std::size_t from_children = 0;
    for (const auto& [name, c] : m.children()) from_children += c->named_parameters().size();
    auto all = m.named_parameters(path);
    if (all.size() > from_children) {
      units.push_back({path, &m, std::move(all)});
      return;
    }
    for (const auto& [name, c] : m.children()) self(self, *c, path.empty() ? name : path + "." + name);
  };
  visit(visit, model, "");
  return units;
}

}  // namespace tessera::dp::detail
