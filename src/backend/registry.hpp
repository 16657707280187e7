#pragma once
// Private: the backend singletons behind backend_for().

#include "tessera/backend.hpp"

namespace tessera::detail {

Backend& host_backend();
// The CUDA backend, from the CUDA plugin (cuda_plugin.hpp), loaded on this first request;
// throws UnsupportedError when the build has no CUDA or the plugin cannot be loaded.
Backend& cuda_backend();

}  // namespace tessera::detail
