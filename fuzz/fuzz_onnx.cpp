// libFuzzer target: the bytes as an ONNX file -> onnx::parse_onnx_model (the protobuf,
// tensors and their sizes, attributes, the graph's wiring and order) and, for a graph
// that parses, an OnnxModel built on the built-in ops (every node's factory and its
// attribute checks) (docs/fuzzing.md).
//
// Expected outcomes: the file is accepted, or a tessera::Error names what is wrong. A
// finding is any other exception, a crash or a sanitizer report. The graph is not run:
// a hostile graph may legitimately ask for more memory than the fuzzer allows.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "onnx/graph.hpp"
#include "tessera/error.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_onnx: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    // A folder with nothing in it: external data the bytes name is refused or missing.
    const tessera::onnx::Graph graph =
        tessera::onnx::parse_onnx_model(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "/nonexistent-tessera-fuzz/model.onnx");
    const tessera::onnx::OnnxModel model(graph);
    (void)model.info();
  } catch (const tessera::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  } catch (const std::exception& e) {
    finding("non-tessera exception from the ONNX reader", e.what());
  } catch (...) {
    finding("non-std exception from the ONNX reader", "(unknown type)");
  }
  return 0;
}
