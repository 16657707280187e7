// The ONNX file functions of a build without ONNX's protobuf classes
// (cmake/TesseraOnnx.cmake): each says how to get them. Graphs built in code still run.
#include "onnx/graph.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx {

namespace {

[[noreturn]] void no_onnx_support() {
  throw UnsupportedError(
      "this tessera was built without ONNX support (install libonnx-dev and libprotobuf-dev and reconfigure)");
}

}  // namespace

bool onnx_file_support() noexcept { return false; }

Graph read_onnx_file(const std::string&, const ReadOptions&) { no_onnx_support(); }

Graph parse_onnx_model(std::string_view, const std::string&, const ReadOptions&) { no_onnx_support(); }

Value read_tensor_file(const std::string&) { no_onnx_support(); }

void save_onnx_with_initializers(const std::string&, const std::string&, const std::map<std::string, Tensor>&) {
  no_onnx_support();
}

}  // namespace tessera::onnx
