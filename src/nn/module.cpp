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

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  const std::string lead = prefix.empty() ? "" : prefix + ".";
  for (auto& [name, c] : children_) {
    for (auto& entry : c->named_modules(lead + name)) out.push_back(std::move(entry));
  }
  return out;
}

Module* Module::find(const std::string& path) const {
  const Module* current = this;
  std::size_t start = 0;
  while (current != nullptr && start <= path.size() && !path.empty()) {
    const std::size_t dot = path.find('.', start);
    const std::string component = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    current = current->child(component);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return const_cast<Module*>(current);
}

Module& Module::at(const std::string& path) const {
  if (Module* m = find(path)) return *m;
  // Name the first component that is missing, so a typo is easy to find.
  const Module* current = this;
  std::string walked;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    const std::string component = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const Module* next = current->child(component);
    if (next == nullptr) {
      std::string names;
      for (const auto& [n, c] : current->children_) names += (names.empty() ? "" : ", ") + n;
      throw InvalidArgument("no module at path '" + path + "': " + current->type_name() +
                            (walked.empty() ? "" : " '" + walked + "'") + " has no child '" + component +
                            "' (children: " + (names.empty() ? "none" : names) + ")");
    }
    walked += (walked.empty() ? "" : ".") + component;
    current = next;
    start = dot + 1;
  }
}

std::unique_ptr<Module> Module::replace(const std::string& path, std::unique_ptr<Module> replacement) {
  if (path.empty()) throw InvalidArgument("Module::replace: cannot replace the root module");
  if (!replacement) throw InvalidArgument("Module::replace: null replacement for '" + path + "'");
  const std::size_t dot = path.rfind('.');
  Module& parent = dot == std::string::npos ? *this : at(path.substr(0, dot));
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  for (auto& [n, c] : parent.children_) {
    if (n == name) {
      // The replacement computes as the module it replaces did (a converted or wrapped
      // layer keeps the model's precision, whichever was set first).
      replacement->set_compute_precision(c->compute_precision());
      std::swap(c, replacement);
      return replacement;
    }
  }
  (void)at(path);  // throws, naming the missing component
  throw InternalError("Module::replace: unreachable");
}

void Module::set_compute_precision(Precision precision) {
  precision_ = precision;
  for (auto& [name, c] : children_) c->set_compute_precision(precision);
}

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

}  // namespace tessera::nn
