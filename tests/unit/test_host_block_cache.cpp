// The host backend's cache of blocks (src/backend/host/host_backend.cpp): a freed block
// of 128 KiB or more serves the next request of its bucket (512 bytes up to 1 MiB, 2 MiB
// beyond), memory handed out again is as good as new (zeros() still zero-fills), small
// blocks go straight to the heap, and Compute::release_cached_memory empties the cache.

#include <gtest/gtest.h>

#include <vector>

#include "backend/compute.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;  // AddressSanitizer builds cache nothing
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif
#else
constexpr bool kCaching = true;
#endif

TEST(HostBlockCache, LargeBlocksAreReusedWithinTheirBucket) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer build: the host backend caches nothing";
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({3 << 20}, DType::f32);  // 12 MiB
    first = a.data();
  }
  Tensor b = Tensor::empty({3 << 20}, DType::f32);
  EXPECT_EQ(b.data(), first);
  const void* second = b.data();
  b = Tensor();
  // 11.5 MiB of f64 rounds up to the same 12 MiB bucket.
  Tensor c = Tensor::empty({(11 << 20) / 8 + (1 << 16)}, DType::f64);
  EXPECT_EQ(c.data(), second);
}

// A pipeline stage's 512 KiB activations: from the heap, each step re-faulted their
// pages (hundreds to thousands of page faults per GPipe step); from the cache they are
// the same blocks every step.
TEST(HostBlockCache, MidSizedBlocksAreReusedWithinTheirBucket) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer build: the host backend caches nothing";
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({128, 1024}, DType::f32);  // 512 KiB
    first = a.data();
  }
  Tensor b = Tensor::empty({128, 1024}, DType::f32);
  EXPECT_EQ(b.data(), first);
  const void* second = b.data();
  b = Tensor();
  // 40 bytes less rounds up to the same 512-byte bucket; 128 KiB exactly is cached too.
  Tensor c = Tensor::empty({128 * 1024 - 10}, DType::f32);
  EXPECT_EQ(c.data(), second);
  const void* smallest = nullptr;
  {
    Tensor d = Tensor::empty({32 * 1024}, DType::f32);  // 128 KiB
    smallest = d.data();
  }
  Tensor e = Tensor::empty({16 * 1024}, DType::f64);
  EXPECT_EQ(e.data(), smallest);
}

TEST(HostBlockCache, ReusedMemoryIsZeroedByZeros) {
  {
    Tensor dirty = Tensor::empty({1 << 20}, DType::f32);  // 4 MiB
    float* p = dirty.data<float>();
    for (std::int64_t i = 0; i < dirty.numel(); ++i) p[i] = 7.0f;
  }
  Tensor z = Tensor::zeros({1 << 20}, DType::f32);
  const std::vector<float> v = z.to_vector<float>();
  for (float x : v) ASSERT_EQ(x, 0.0f);
}

TEST(HostBlockCache, ReleaseEmptiesTheCache) {
  {
    Tensor a = Tensor::empty({5 << 20}, DType::f32);
  }
  detail::compute_for(Device::host()).release_cached_memory(0);
  // Whatever the heap hands out now, the tensor works.
  Tensor b = Tensor::zeros({5 << 20}, DType::f32);
  EXPECT_EQ(b.to_vector<float>()[12345], 0.0f);
  detail::compute_for(Device::host()).release_cached_memory(0);  // twice is fine
}

TEST(HostBlockCache, SmallAndEmptyTensorsStillWork) {
  for (int round = 0; round < 3; ++round) {
    Tensor small = Tensor::zeros({1000}, DType::f64);
    Tensor empty = Tensor::zeros({0, 4}, DType::f32);
    EXPECT_EQ(small.to_vector<double>()[999], 0.0);
    EXPECT_EQ(empty.numel(), 0);
  }
}

}  // namespace
