#pragma once
// Bring your own model: an ONNX file (exported by torch.onnx.export, say) as a tessera
// module that runs forward, differentiates and trains, and whose trained weights go
// back into the file for PyTorch and ONNX Runtime users (docs/onnx.md).
//
//   auto model = tessera::onnx::load_onnx("unet.onnx");            // static shapes
//   tessera::Tensor y = model->forward(x);                          // one input, one output
//   model->backward(dy);                                            // adds into Parameter::grad
//   for (auto& [name, p] : model->named_parameters()) ...           // the initializers' names
//   tessera::onnx::save_onnx(*model, "unet.onnx", "unet-tuned.onnx");
//
// The file's floating initializers that feed a differentiable input of an op are the
// module's parameters, named as in the file; the other initializers are constants. The
// graph runs eagerly on the host backend, f32 or f64 as the file says. Errors name the
// file and the node, value, tensor or input at fault. Without ONNX support in the build
// (libonnx-dev), load_onnx and save_onnx throw UnsupportedError saying so.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tensor.hpp"

namespace tessera::onnx {

struct Graph;
class GraphExecutor;
class OpRegistry;

struct LoadOptions {
  // The static shape of each input whose shape in the file has a symbolic dim (a batch
  // dim, say), by input name: tessera runs static shapes.
  std::map<std::string, Shape> input_shapes;
  // The same by position (the i-th graph input that is not an initializer), for inputs
  // not named above.
  std::vector<Shape> input_shapes_in_order;
  // Keep the other symbolic dims unresolved (-1) instead of refusing them: for looking at
  // a model (info); running it then refuses every input of a symbolic shape.
  bool defer_symbolic_inputs = false;
};

// A graph input that holds a field split over a decomposition: its axes lat_axis and
// lon_axis (counted from the end when negative) hold the decomposition's latitudes and
// longitudes. has_lon false: the input is split along lat_axis only (the columns of a
// per-column model), over a decomposition of global shape (columns, 1).
struct SplitInput {
  std::string input;
  int lat_axis = -2;
  int lon_axis = -1;
  bool has_lon = true;
};

class OnnxModel : public nn::Module {
 public:
  // The graph's ops from `registry` (builtin_ops() for the first form); an op outside it
  // is refused here, naming the node, the op and the opset.
  explicit OnnxModel(const Graph& graph);
  OnnxModel(const Graph& graph, const OpRegistry& registry);
  ~OnnxModel() override;

  // One input, one output (InvalidArgument naming the counts otherwise).
  Tensor forward(const Tensor& input) override;
  // The gradient of the input; parameter gradients are added into Parameter::grad.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "OnnxModel"; }

  // Any number of inputs and outputs, in the graph's order. Floating inputs take a
  // tensor of the declared dtype, integer and boolean inputs an i64 tensor (booleans
  // 0/1); integer outputs come back as i64 tensors.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // From the outputs' gradients (undefined: zero), after run: adds into the parameters'
  // gradients and returns the inputs' (zeros for a floating input no gradient reaches,
  // undefined for an integer input).
  std::vector<Tensor> backward_all(const std::vector<Tensor>& grad_outputs);

  // Domain-parallel from the next forward on (docs/onnx.md, "Domain-parallel
  // execution"): each input in `inputs` (by default the first, along its last two axes)
  // takes this rank's block of the field `decomposition` splits, as the code holds it;
  // the other inputs stay whole. Every node that reads a split value runs on the block:
  // locally, with a halo from the neighbours (Conv, pools, linear Resize, a periodic
  // wrap or Pad before them), or with sums over the ranks (reductions, normalisations);
  // a node that cannot is refused on the first forward, on every rank, by an
  // UnsupportedError naming it. Outputs come back as this rank's block of a split
  // output or the whole value. Parameter gradients are the full ones on every rank.
  // `decomposition` must outlive the model. Collective on the first forward after it.
  void split_over(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs = {});
  // How each node ran in the last forward of a split model ("local", "halo lat 1+1, lon
  // 1+1", "sum over ranks", ...): what `tessera-onnx info --domain` prints.
  std::string placement_summary() const;
  // After a forward of a split model: how output `index` is split (split false: the
  // whole value on every rank), so a caller can gather it.
  struct OutputSplit {
    bool split = false;
    int lat_axis = -1, lon_axis = -1;  // lon_axis -1: split along lat_axis only
    std::int64_t global_lat = 0, global_lon = 0;
    domain::LocalBox box;  // this rank's
  };
  OutputSplit output_split(std::size_t index) const;

  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  std::vector<Shape> input_shapes() const;
  // This rank's shape of each input: input_shapes() unless the model is split, then the
  // block of each split input.
  std::vector<Shape> block_input_shapes() const;
  // The tessera dtype each graph input and output is stored in: f32 or f64 for floating
  // values, i64 for integer and boolean ones.
  std::vector<DType> input_dtypes() const;
  std::vector<DType> output_dtypes() const;
  // The file the model came from ("" for a graph built in code).
  const std::string& source() const;
  // Opsets, inputs and outputs, how many nodes of each op, the parameters and their
  // shapes, the constants: what `tessera-onnx info` prints.
  std::string info() const;

 private:
  std::unique_ptr<GraphExecutor> executor_;
};

// Reads an ONNX model file and builds it with every op tessera runs.
std::unique_ptr<OnnxModel> load_onnx(const std::string& path, const LoadOptions& options = {});

// Writes `out_path`: the model in `in_path` (the file `model` was loaded from, or one
// with the same initializers) with the model's current parameter values as its
// initializers. `out_path` may equal `in_path`; it is written to a temporary file and
// renamed.
void save_onnx(OnnxModel& model, const std::string& in_path, const std::string& out_path);

}  // namespace tessera::onnx
