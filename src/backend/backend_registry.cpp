#include "backend/registry.hpp"
#include "backend/cuda_plugin.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

Backend& backend_for(DeviceType type) {
  return type == DeviceType::cuda ? detail::cuda_backend() : detail::host_backend();
}

void require_usable(const Tensor& t, const std::string& who) {
  if (t.device().is_cuda()) {
    // backend_for's own message (no CUDA in this build, or the plugin failed to load)
    // cannot say which operation asked.
    try {
      detail::cuda_plugin();
    } catch (const UnsupportedError& error) {
      throw UnsupportedError(who + ": tensor " + t.str() + " needs the CUDA compute backend: " + error.what());
    }
  }
  backend_for(t.device()).require_usable(t, who);
}

}  // namespace tessera
