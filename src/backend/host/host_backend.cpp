// Host backend: memory from the C++ heap (large blocks cached, see HostBlockCache), copies
// with memcpy and a strided loop.

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "backend/compute.hpp"
#include "backend/host/host_compute.hpp"
#include "backend/kernel_math.hpp"
#include "backend/registry.hpp"
#include "tessera/error.hpp"

// Whether AddressSanitizer instruments this build (GCC's macro, or Clang's feature test).
#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_HOST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_HOST_ASAN 1
#endif
#endif

namespace tessera::detail {
namespace {

// 64-byte alignment: a cache line, and what AVX-512 loads in OpenBLAS prefer.
constexpr std::size_t kAlignment = 64;

void* aligned_or_throw(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr == nullptr) throw InvalidArgument("host allocation of " + std::to_string(bytes) + " bytes failed");
  return ptr;
}

// Host blocks of kMinCachedBytes (128 KiB, glibc's default mmap threshold) and more are
// kept when freed, in one free list per size bucket (caching_bucket_bytes,
// kernel_math.hpp: the CUDA allocator's buckets, 512 bytes up to 1 MiB, 2 MiB beyond),
// and serve the next request of their bucket. A training step allocates the same
// activations and gradients every step; from the heap each one is fresh mmap'd or
// trimmed-and-regrown memory, so every step paid page faults and the kernel's zeroing of
// every page it touched. From the cache it is memory already mapped and warm. The
// smaller limit matters where a step holds many mid-sized blocks at once: a GPipe
// pipeline stage at hidden 1024 (512 KiB activations, eight microbatches held) took
// 400-5800 page faults per step with only blocks over 1 MiB cached, ~0 with this limit,
// and a fault costs ~15 us on a virtual machine (docs/performance.md). At most
// kMaxCachedBytes stay cached (a block that would exceed it goes back to the heap);
// Compute::release_cached_memory returns them all. Under AddressSanitizer nothing is
// cached, so a use after free is still caught.
class HostBlockCache {
 public:
  static constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;
  static constexpr std::size_t kMinCachedBytes = std::size_t{128} << 10;

  void* allocate(std::size_t bytes) {
    if (!cacheable(bytes)) return aligned_or_throw(bytes);
    const std::size_t bucket = caching_bucket_bytes(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bucket);
      if (it != free_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= bucket;
        return ptr;
      }
    }
    return aligned_or_throw(bucket);
  }

  void deallocate(void* ptr, std::size_t bytes) noexcept {
    if (ptr == nullptr) return;
    if (cacheable(bytes)) {
      const std::size_t bucket = caching_bucket_bytes(bytes);
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cached_bytes_ + bucket <= kMaxCachedBytes) {
          free_[bucket].push_back(ptr);
          cached_bytes_ += bucket;
          return;
        }
      } catch (...) {
        // The free list could not grow: the block goes back to the heap below.
      }
    }
    std::free(ptr);
  }

  void release() noexcept {
    std::unordered_map<std::size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      cached_bytes_ = 0;
    }
    for (auto& [bucket, list] : blocks)
      for (void* ptr : list) std::free(ptr);
  }

 private:
  static bool cacheable(std::size_t bytes) {
#if defined(TESSERA_HOST_ASAN)
    (void)bytes;
    return false;
#else
    return bytes >= kMinCachedBytes && bytes <= kMaxCachedBytes;
#endif
  }

  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_bytes_ = 0;
};

// Never destroyed: tensors of static lifetime may be freed after it would have been.
HostBlockCache& block_cache() {
  static HostBlockCache* cache = new HostBlockCache;
  return *cache;
}

class HostBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::host; }
  std::string name() const override { return "host"; }

  void* allocate(std::size_t bytes, int) override {
    if (bytes == 0) return nullptr;
    return block_cache().allocate(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes, int) noexcept override { block_cache().deallocate(ptr, bytes); }
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
    // Rows contiguous on both sides (a block of a bigger array, a halo's interior): one
    // memcpy per row instead of an index computation per element.
    const int last = src_layout.ndim - 1;
    if (last >= 0 && src_layout.shape[last] > 1 && src_layout.strides[last] == 1 && dst_layout.strides[last] == 1) {
      const std::int64_t row = src_layout.shape[last];
      const std::size_t row_bytes = static_cast<std::size_t>(row) * element_size;
      for (std::int64_t i = 0; i < count; i += row) {
        std::memcpy(out + strided_offset(i, dst_layout) * element_size,
                    in + strided_offset(i, src_layout) * element_size, row_bytes);
      }
      return;
    }
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

void release_host_cached_blocks() noexcept { block_cache().release(); }

Backend& host_backend() {
  static HostBackend backend;
  return backend;
}

}  // namespace tessera::detail
