#include "onnx/op.hpp"

namespace tessera::onnx {

void register_linear_conv_ops(OpRegistry& registry) { (void)registry; }

}  // namespace tessera::onnx
