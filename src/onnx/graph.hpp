#pragma once
// An ONNX model as tessera holds it after reading the file: nodes in an order that runs
// (topological), the initializers as Values, the graph's inputs and outputs with their
// types and static shapes, the opsets. No protobuf type appears here: only
// onnx_file.cpp sees the file's classes, and everything above reads this.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "onnx/op.hpp"
#include "onnx/value.hpp"

namespace tessera::onnx {

// A graph input or output: its name, element type and shape. Inputs always have a
// static shape (a symbolic dim is resolved by ReadOptions::input_shapes or refused);
// an output's shape is what the file declares and `shape_known` is false where a dim is
// symbolic or the file gives none.
struct GraphValue {
  std::string name;
  ElementType type = ElementType::f32;
  Shape shape;
  bool shape_known = true;
};

struct Graph {
  std::string source;                 // the file it came from (for messages); "" when built in code
  std::map<std::string, int> opsets;  // domain ("" for ONNX's default) -> version
  std::vector<GraphValue> inputs;     // the inputs a caller feeds (initializers excluded)
  std::vector<GraphValue> outputs;
  std::map<std::string, Value> initializers;
  std::vector<NodeSpec> nodes;        // topologically sorted

  // "model 'unet.onnx'" or "the graph" when built in code: how messages name the model.
  std::string where() const;
};

// What a reader is told beyond the file.
struct ReadOptions {
  // Static shapes for inputs whose file shape has symbolic dims (batch, say), by input
  // name. A shape given for an input with static dims must agree with them.
  std::map<std::string, Shape> input_shapes;
  // The same by position (the i-th input that is not an initializer), for inputs not
  // named above: for callers that know the data but not the names (tessera-onnx run).
  std::vector<Shape> input_shapes_in_order;
  // Keep symbolic dims of inputs not in input_shapes unresolved (GraphValue::shape_known
  // false, -1 in `shape`) for a caller that sets the shapes itself before building an
  // OnnxModel (ONNX's conformance runner, from its test data).
  bool defer_symbolic_inputs = false;
};

// Orders `graph.nodes` so that every node comes after the producers of its inputs (the
// file's order where it already does), after checking that every value a node reads has
// exactly one producer (a node, an initializer or a graph input) and every graph output
// is produced. InvalidArgument naming the node and value at fault, or a node on a cycle.
void sort_and_check_graph(Graph& graph);

// --- The file (onnx_file.cpp; without ONNX support, UnsupportedError saying how to get it)

// Whether this build can read ONNX files.
bool onnx_file_support() noexcept;

// Reads the ModelProto in `path`. Errors name the file and the node, value, tensor or
// input at fault; a hostile file is an error, never a crash.
Graph read_onnx_file(const std::string& path, const ReadOptions& options = {});
// The same from the file's bytes; `path` names it in messages and its folder is where
// external data is looked for.
Graph parse_onnx_model(std::string_view bytes, const std::string& path, const ReadOptions& options = {});

// A TensorProto file (ONNX's test data: input_0.pb, output_0.pb).
Value read_tensor_file(const std::string& path);

// Writes `out_path` as a copy of the model in `in_path` whose initializers named in
// `values` hold the new values (same element type and shape as in the file, stored as
// raw_data). Initializers stored as external data and not replaced are copied into the
// new file. Written to a temporary file beside `out_path` and renamed over it, so a
// failure leaves no half-written model.
void save_onnx_with_initializers(const std::string& in_path, const std::string& out_path,
                                 const std::map<std::string, Tensor>& values);

}  // namespace tessera::onnx
