#include "onnx/op.hpp"

namespace tessera::onnx {

void register_shape_ops(OpRegistry& registry) { (void)registry; }

}  // namespace tessera::onnx
