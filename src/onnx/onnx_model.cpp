// OnnxModel: an imported graph as an nn::Module (tessera/onnx/onnx_model.hpp).
#include "tessera/onnx/onnx_model.hpp"

#include <sstream>

#include "onnx/graph.hpp"
#include "onnx/graph_executor.hpp"
#include "onnx/op.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx {

OnnxModel::OnnxModel(const Graph& graph) : OnnxModel(graph, builtin_ops()) {}

OnnxModel::OnnxModel(const Graph& graph, const OpRegistry& registry)
    : executor_(std::make_unique<GraphExecutor>(graph, registry)) {
  for (auto& entry : executor_->parameters()) register_parameter(entry.first, entry.second);
}

OnnxModel::~OnnxModel() = default;

namespace {

Value as_value(const Tensor& tensor) {
  Value value;
  value.tensor = tensor;
  return value;  // its element type is set from the graph's declaration when checked
}

void require_one_to_one(const Graph& graph, const char* call) {
  if (graph.inputs.size() != 1 || graph.outputs.size() != 1) {
    throw InvalidArgument(graph.where() + " has " + std::to_string(graph.inputs.size()) + " inputs and " +
                          std::to_string(graph.outputs.size()) + " outputs; " + call +
                          " runs one-input one-output graphs (use run / backward_all)");
  }
}

}  // namespace

std::vector<Tensor> OnnxModel::run(const std::vector<Tensor>& inputs) {
  std::vector<Value> values;
  values.reserve(inputs.size());
  for (const Tensor& t : inputs) values.push_back(as_value(t));
  std::vector<Tensor> outputs;
  for (Value& v : executor_->forward(values)) outputs.push_back(std::move(v.tensor));
  return outputs;
}

std::vector<Tensor> OnnxModel::backward_all(const std::vector<Tensor>& grad_outputs) {
  return executor_->backward(grad_outputs);
}

Tensor OnnxModel::forward(const Tensor& input) {
  require_one_to_one(executor_->graph(), "forward");
  return run({input}).front();
}

Tensor OnnxModel::backward(const Tensor& grad_output) {
  require_one_to_one(executor_->graph(), "backward");
  return backward_all({grad_output}).front();
}

std::vector<std::string> OnnxModel::input_names() const {
  std::vector<std::string> names;
  for (const GraphValue& v : executor_->graph().inputs) names.push_back(v.name);
  return names;
}

std::vector<std::string> OnnxModel::output_names() const {
  std::vector<std::string> names;
  for (const GraphValue& v : executor_->graph().outputs) names.push_back(v.name);
  return names;
}

std::vector<Shape> OnnxModel::input_shapes() const {
  std::vector<Shape> shapes;
  for (const GraphValue& v : executor_->graph().inputs) shapes.push_back(v.shape);
  return shapes;
}

std::vector<Shape> OnnxModel::block_input_shapes() const {
  std::vector<Shape> shapes;
  const std::vector<GraphValue>& inputs = executor_->graph().inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) shapes.push_back(executor_->block_input_shape(i));
  return shapes;
}

std::vector<DType> OnnxModel::input_dtypes() const {
  std::vector<DType> dtypes;
  for (const GraphValue& v : executor_->graph().inputs) dtypes.push_back(storage_dtype(v.type));
  return dtypes;
}

std::vector<DType> OnnxModel::output_dtypes() const {
  std::vector<DType> dtypes;
  for (const GraphValue& v : executor_->graph().outputs) dtypes.push_back(storage_dtype(v.type));
  return dtypes;
}

void OnnxModel::split_over(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs) {
  executor_->split_over(decomposition, std::move(inputs));
}

std::string OnnxModel::placement_summary() const { return executor_->placement_summary(); }

OnnxModel::OutputSplit OnnxModel::output_split(std::size_t index) const {
  const Graph& graph = executor_->graph();
  if (index >= graph.outputs.size()) {
    throw InvalidArgument(graph.where() + " has " + std::to_string(graph.outputs.size()) + " outputs, asked for output " +
                          std::to_string(index));
  }
  const Layout layout = executor_->layout_of(graph.outputs[index].name);
  OutputSplit out;
  if (layout.kind == Layout::Kind::whole) return out;
  if (layout.kind != Layout::Kind::split) {
    throw UnsupportedError(graph.where() + ": output '" + graph.outputs[index].name + "' is " + layout.str() +
                           ", which cannot be returned split");
  }
  out.split = true;
  out.lat_axis = layout.lat_axis;
  out.lon_axis = layout.lon_axis;
  out.global_lat = layout.grid->global_lat();
  out.global_lon = layout.grid->global_lon();
  out.box = layout.grid->box();
  return out;
}

const std::string& OnnxModel::source() const { return executor_->graph().source; }

namespace {

// "x: float[?, 3]": a symbolic or unknown dim as "?".
std::string declared_str(const GraphValue& v) {
  std::string shape = "[";
  for (std::size_t d = 0; d < v.shape.size(); ++d) {
    shape += (d ? ", " : "") + (v.shape[d] < 0 ? std::string("?") : std::to_string(v.shape[d]));
  }
  if (!v.shape_known && v.shape.empty()) shape += "?";
  return v.name + ": " + std::string(element_type_name(v.type)) + shape + "]";
}

}  // namespace

std::string OnnxModel::info() const {
  const Graph& graph = executor_->graph();
  std::ostringstream out;
  out << (graph.source.empty() ? std::string("graph built in code") : graph.source) << "\n";
  out << "opsets:";
  for (const auto& entry : graph.opsets) out << " " << (entry.first.empty() ? "ai.onnx" : entry.first) << "=" << entry.second;
  out << "\ninputs:\n";
  for (const GraphValue& v : graph.inputs) out << "  " << declared_str(v) << "\n";
  out << "outputs:\n";
  for (const GraphValue& v : graph.outputs) out << "  " << declared_str(v) << "\n";
  std::map<std::string, int> op_counts;
  for (const NodeSpec& node : graph.nodes) ++op_counts[node.op_type];
  out << "nodes: " << graph.nodes.size() << "\n";
  for (const auto& entry : op_counts) out << "  " << entry.first << " " << entry.second << "\n";
  std::int64_t numel = 0;
  for (const auto& entry : executor_->parameters()) numel += entry.second.value.numel();
  out << "parameters: " << executor_->parameters().size() << " (" << numel << " elements)\n";
  for (const auto& entry : executor_->parameters()) {
    out << "  " << entry.first << ": " << entry.second.value.str() << "\n";
  }
  out << "constants: " << graph.initializers.size() << "\n";
  for (const auto& entry : graph.initializers) out << "  " << entry.first << ": " << entry.second.str() << "\n";
  return out.str();
}

std::unique_ptr<OnnxModel> load_onnx(const std::string& path, const LoadOptions& options) {
  ReadOptions read;
  read.input_shapes = options.input_shapes;
  read.input_shapes_in_order = options.input_shapes_in_order;
  read.defer_symbolic_inputs = options.defer_symbolic_inputs;
  return std::make_unique<OnnxModel>(read_onnx_file(path, read));
}

void save_onnx(OnnxModel& model, const std::string& in_path, const std::string& out_path) {
  std::map<std::string, Tensor> values;
  for (const auto& entry : model.named_parameters()) values[entry.first] = entry.second->value;
  save_onnx_with_initializers(in_path, out_path, values);
}

}  // namespace tessera::onnx
