#include "onnx/op.hpp"

namespace tessera::onnx {

void register_pool_resize_ops(OpRegistry& registry) { (void)registry; }

}  // namespace tessera::onnx
