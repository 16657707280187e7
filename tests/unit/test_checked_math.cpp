// The overflow-checked size arithmetic (detail/checked_math.hpp): exact results while they
// fit, and past the limit an error that names the caller and the values.

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "tessera/detail/checked_math.hpp"

using namespace tessera;
using namespace tessera::detail;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Runs `f`, expects a ShapeError whose message holds every fragment.
template <class F>
void expect_shape_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
    }
  }
}

}  // namespace

TEST(CheckedMath, TryFormsAreExactOrEmpty) {
  EXPECT_EQ(try_mul<int>(46340, 46340), 2147395600);
  EXPECT_FALSE(try_mul<int>(65536, 65536));  // 2^32: wrapped to 0, the SIGFPE of a mesh
  EXPECT_FALSE(try_mul<int>(INT_MAX, INT_MAX));  // wrapped to 1, an accepted mesh
  EXPECT_EQ(try_mul<int>(INT_MAX, 1), INT_MAX);
  EXPECT_EQ(try_mul<std::int64_t>(-3, 4), -12);
  EXPECT_EQ(try_add<std::int64_t>(kMax - 1, 1), kMax);
  EXPECT_FALSE(try_add<std::int64_t>(kMax, 1));
  static_assert(try_mul<std::int64_t>(1 << 20, 1 << 20) == std::int64_t{1} << 40);
}

TEST(CheckedMath, ThrowingFormsNameTheCallerAndTheValues) {
  EXPECT_EQ(checked_mul(3, 5, "who"), 15);
  EXPECT_EQ(checked_add(kMax - 2, 2, "who"), kMax);
  expect_shape_error([] { checked_mul(kMax, 2, "f: extents"); }, {"f: extents", std::to_string(kMax), "* 2"});
  expect_shape_error([] { checked_add(kMax, 3, "g: offset"); }, {"g: offset", "+ 3"});
}

TEST(CheckedMath, NumelRejectsNegativeExtentsAndOverflowButNotEmptyShapes) {
  EXPECT_EQ(checked_numel(std::vector<std::int64_t>{}, "s"), 1);
  EXPECT_EQ(checked_numel(std::vector<std::int64_t>{2, 3, 4}, "s"), 24);
  EXPECT_EQ(checked_numel(std::vector<std::int64_t>{kMax, kMax, 0}, "s"), 0);  // no elements
  expect_shape_error([] { checked_numel(std::vector<std::int64_t>{std::int64_t{1} << 62, 4}, "view of x"); },
                     {"view of x", "[4611686018427387904, 4]"});
  expect_shape_error([] { checked_numel(std::vector<std::int64_t>{2, -1}, "y"); }, {"y", "negative", "dim 1"});
  EXPECT_EQ(extents_str(std::vector<std::int64_t>{2, 3}), "[2, 3]");
}

TEST(CheckedMath, BytesFitInTheAddressSpace) {
  EXPECT_EQ(checked_bytes(10, 8, "b"), 80u);
  EXPECT_EQ(checked_bytes(0, 8, "b"), 0u);
  expect_shape_error([] { checked_bytes(std::int64_t{1} << 61, 8, "array 'u'"); }, {"array 'u'", "8 bytes"});
  expect_shape_error([] { checked_bytes(-1, 4, "c"); }, {"c"});
}
