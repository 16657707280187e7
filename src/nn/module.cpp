#include "tessera/nn/module.hpp"

namespace tessera::nn {

void Module::register_parameter(std::string name, Parameter& parameter) {
  for (const auto& [existing, p] : parameters_) {
    if (existing == name) throw InvalidArgument(type_name() + ": parameter '" + name + "' registered twice");
  }
  parameters_.emplace_back(std::move(name), &parameter);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters(const std::string& prefix) {
  const std::string lead = prefix.empty() ? "" : prefix + ".";
  std::vector<std::pair<std::string, Parameter*>> out;
  for (auto& [name, p] : parameters_) out.emplace_back(lead + name, p);
  for (auto& [name, c] : children_) {
    for (auto& entry : c->named_parameters(lead + name)) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

Module* Module::child(const std::string& name) const {
  for (const auto& [n, c] : children_) {
    if (n == name) return c.get();
  }
  return nullptr;
}

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

}  // namespace tessera::nn
