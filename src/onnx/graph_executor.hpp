#pragma once
// Runs a Graph eagerly: forward node by node in topological order, backward in reverse,
// gradients of floating values summed where a value feeds several nodes.
//
// Floating initializers that feed a differentiable input of some op become Parameters
// (named by the initializer, so messages and checkpoints speak the file's names); every
// other initializer is a constant. Shape arithmetic (Shape -> Gather -> Concat ->
// Reshape) simply runs on its i64 values. Values are dropped after their last reader
// ran: each op caches what its backward needs.

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "onnx/domain_layout.hpp"
#include "onnx/domain_placement.hpp"
#include "onnx/graph.hpp"
#include "onnx/op.hpp"
#include "tessera/parameter.hpp"

namespace tessera::onnx {

class GraphExecutor {
 public:
  // Creates every node's Op (an op outside `registry` is refused here, naming the node).
  // `registry` must outlive the executor (a split run rebuilds ops from it).
  GraphExecutor(Graph graph, const OpRegistry& registry);

  // Runs on this rank's part of a split field from the next forward on: the forward
  // lets `placement` replace each node's op (domain_placement.hpp) the first time it
  // runs, and tracks every value's layout.
  void split_over(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs);
  bool is_split() const { return placement_ != nullptr; }
  // Graph input `index`'s shape on this rank (its block when split).
  const Shape& block_input_shape(std::size_t index) const {
    return placement_ ? placement_->local_input_shape(index) : graph_.inputs.at(index).shape;
  }
  // One line per node of how it ran in the last forward (placed ops only).
  std::string placement_summary() const;
  // A value's layout in the last forward (whole when the graph is not split).
  Layout layout_of(const std::string& name) const;

  // The graph's outputs from its inputs (in the order of graph().inputs), each checked
  // against the input's declared element type and shape.
  std::vector<Value> forward(const std::vector<Value>& inputs);
  // From the gradients of the outputs (undefined: zero) after one forward: adds the
  // parameters' gradients into Parameter::grad and returns the gradients of the graph's
  // inputs (zeros for a floating input no gradient reaches, undefined for an integer one).
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs);

  const Graph& graph() const { return graph_; }
  // The parameters in the order the graph first reads them, with their initializers' names.
  std::deque<std::pair<std::string, Parameter>>& parameters() { return parameters_; }
  const std::deque<std::pair<std::string, Parameter>>& parameters() const { return parameters_; }

 private:
  struct GradSlot {
    Tensor grad;
    bool owned = false;  // false while it is a tensor an op or the caller handed over
  };

  void find_parameters();
  void plan_backward();
  void plan_frees();
  Value input_value(const Value& given, const GraphValue& declared, const Shape& expected_shape) const;
  std::vector<Layout> input_layouts(const NodeSpec& node) const;
  const Value& lookup(const std::map<std::string, Value>& values, const std::string& name) const;
  void accumulate(std::map<std::string, GradSlot>& grads, const std::string& name, const Tensor& grad,
                  const std::string& from) const;

  Graph graph_;  // its initializers: the constants (parameters moved out)
  std::vector<std::unique_ptr<Op>> ops_;
  std::deque<std::pair<std::string, Parameter>> parameters_;
  std::map<std::string, Parameter*> parameter_by_name_;
  std::set<std::string> requires_grad_;        // floating values a gradient can reach
  std::vector<bool> node_backward_;            // whether node n passes gradients back
  std::vector<std::vector<std::string>> frees_after_;  // values dropped after node n ran
  std::map<std::string, Shape> forward_shapes_;        // every value's shape in the last forward
  bool forward_done_ = false;
  const OpRegistry* registry_;
  std::unique_ptr<DomainPlacement> placement_;  // null: every value is whole
  std::vector<bool> placed_;
  std::map<std::string, Layout> layouts_;      // split runs: every value's layout
};

}  // namespace tessera::onnx
