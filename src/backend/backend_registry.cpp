#include "backend/registry.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

Backend& backend_for(DeviceType type) {
  return type == DeviceType::cuda ? detail::cuda_backend() : detail::host_backend();
}

void require_usable(const Tensor& t, const std::string& who) {
  if (t.device().is_cuda() && !cuda_backend_built()) {
    // backend_for's own message cannot say which operation asked.
    throw UnsupportedError(who + ": tensor " + t.str() +
                           " needs the CUDA compute backend, and tessera was built without it (reconfigure with "
                           "nvcc on PATH or -DTESSERA_ENABLE_CUDA=ON)");
  }
  backend_for(t.device()).require_usable(t, who);
}

}  // namespace tessera
