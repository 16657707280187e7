// Host backend: memory from the C++ heap, copies with memcpy and a strided loop.

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/compute.hpp"
#include "backend/host/host_compute.hpp"
#include "backend/registry.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

// 64-byte alignment: a cache line, and what AVX-512 loads in OpenBLAS prefer.
constexpr std::size_t kAlignment = 64;

class HostBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::host; }
  std::string name() const override { return "host"; }

  void* allocate(std::size_t bytes, int) override {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr) {
      throw InvalidArgument("host allocation of " + std::to_string(bytes) + " bytes failed");
    }
    return ptr;
  }
  void deallocate(void* ptr, std::size_t, int) noexcept override { std::free(ptr); }
  void fill_zero(void* ptr, std::size_t bytes, int) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, int) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes, int) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_strided(void* dst, const StridedLayout& dst_layout, const void* src,
                    const StridedLayout& src_layout, std::size_t element_size,
                    int) override {
    std::int64_t count = 1;
    for (int d = 0; d < src_layout.ndim; ++d) count *= src_layout.shape[d];
    auto* out = static_cast<unsigned char*>(dst);
    const auto* in = static_cast<const unsigned char*>(src);
    for (std::int64_t i = 0; i < count; ++i) {
      std::memcpy(out + strided_offset(i, dst_layout) * element_size,
                  in + strided_offset(i, src_layout) * element_size, element_size);
    }
  }
  void synchronize(int) override {}
  Compute& compute() override { return host_compute(); }
  void require_usable(const Tensor&, const std::string&) override {}
};

}  // namespace

Backend& host_backend() {
  static HostBackend backend;
  return backend;
}

}  // namespace tessera::detail
