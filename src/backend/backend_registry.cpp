#include "backend/registry.hpp"

namespace tessera {

Backend& backend_for(DeviceType type) {
  return type == DeviceType::cuda ? detail::cuda_backend() : detail::host_backend();
}

}  // namespace tessera
