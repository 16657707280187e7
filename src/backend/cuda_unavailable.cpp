// The CUDA entry points of a build configured without the CUDA backend.

#include "backend/registry.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace detail {
Backend& cuda_backend() {
  throw UnsupportedError(
      "a CUDA tensor was requested but tessera was built without the CUDA backend "
      "(reconfigure with nvcc on PATH or -DTESSERA_ENABLE_CUDA=ON)");
}
}  // namespace detail

bool cuda_backend_built() noexcept { return false; }
int cuda_device_count() noexcept { return 0; }
std::string cuda_unavailable_reason() { return "tessera was built without the CUDA backend"; }
std::string cuda_library_versions() { return "built without CUDA"; }

}  // namespace tessera
