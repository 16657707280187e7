// The host compute singleton and the entries that have little to do on the host:
// "pinned" staging memory is ordinary aligned memory, host work is synchronous, and the
// cached memory is the host backend's cache of large blocks (host_backend.cpp).

#include "backend/host/host_compute.hpp"

#include <cstdlib>

namespace tessera::detail {

namespace {
constexpr std::size_t kAlignment = 64;
}

void* HostCompute::allocate_pinned(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (ptr == nullptr) throw InvalidArgument("host staging allocation of " + std::to_string(bytes) + " bytes failed");
  return ptr;
}

void HostCompute::free_pinned(void* ptr) noexcept { std::free(ptr); }
void HostCompute::synchronize_stream(int) {}
void HostCompute::release_cached_memory(int) { release_host_cached_blocks(); }
bool HostCompute::is_device_memory(const void*, int) { return true; }

HostCompute& host_compute() {
  static HostCompute compute;
  return compute;
}

}  // namespace tessera::detail
