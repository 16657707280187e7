#pragma once
// Private: the backend singletons behind backend_for().

#include "tessera/backend.hpp"

namespace tessera::detail {

Backend& host_backend();
// The CUDA backend; in a build without CUDA, throws UnsupportedError.
Backend& cuda_backend();

}  // namespace tessera::detail
