#include "onnx/op.hpp"

namespace tessera::onnx {

void register_reduce_norm_ops(OpRegistry& registry) { (void)registry; }

}  // namespace tessera::onnx
