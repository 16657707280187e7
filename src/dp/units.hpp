#pragma once
// Units: the modules data parallelism hooks. A unit is the topmost module on its path
// that registers parameters itself; it covers its whole subtree. Shared by
// DataParallel (which wraps them) and plan_memory (which predicts their transients).

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tessera/error.hpp"

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

// Tied parameters: those registered by two or more units, and those a module declares it
// reads outside their unit (Module::tied_parameter_paths). Data parallelism keeps them
// dp-replicated and reduces them after the whole backward; the memory plan predicts the
// same. A declared path that names no parameter is an InvalidArgument naming the module.
inline std::unordered_set<Parameter*> find_tied_parameters(nn::Module& model, const std::vector<UnitInfo>& units) {
  std::unordered_set<Parameter*> tied;
  std::unordered_map<Parameter*, const std::string*> owner;
  for (const auto& unit : units) {
    for (const auto& [name, p] : unit.params) {
      auto [it, fresh] = owner.emplace(p, &unit.path);
      if (!fresh && *it->second != unit.path) tied.insert(p);
    }
  }
  for (const auto& [path, m] : model.named_modules()) {
    for (const std::string& relative : m->tied_parameter_paths()) {
      Parameter* found = nullptr;
      for (const auto& [name, p] : m->named_parameters()) {
        if (name == relative) found = p;
      }
      if (found == nullptr) {
        throw InvalidArgument((path.empty() ? std::string("the root module") : "module '" + path + "'") + " (" +
                              m->type_name() + ") declares tied parameter '" + relative +
                              "', which is not one of its parameters");
      }
      tied.insert(found);
    }
  }
  return tied;
}

}  // namespace tessera::dp::detail
