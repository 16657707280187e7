#include "tessera/nn/sequential.hpp"

namespace tessera::nn {

void Sequential::check_appendable(const Module* module) const {
  if (module == nullptr) {
    throw InvalidArgument("Sequential: append(nullptr) as child " + std::to_string(size()));
  }
}

Module& Sequential::operator[](std::size_t i) const {
  if (i >= size()) {
    throw InvalidArgument("Sequential: child index " + std::to_string(i) + " out of range for " +
                          std::to_string(size()) + " children");
  }
  return *children()[i].second;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : children()) x = child->forward(x);
  return x;
}

Tensor Sequential::backward(const Tensor& grad_output) {
  Tensor g = grad_output;
  const auto& kids = children();
  for (auto it = kids.rbegin(); it != kids.rend(); ++it) g = it->second->backward(g);
  return g;
}

}  // namespace tessera::nn
