#include "tessera/device.hpp"

namespace tessera {

std::string Device::str() const {
  if (is_host()) return "host";
  return index == kAutoIndex ? "cuda:auto" : "cuda:" + std::to_string(index);
}

}  // namespace tessera
