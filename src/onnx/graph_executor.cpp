// Eager forward and reverse-order backward over an imported graph (graph_executor.hpp).
#include "onnx/graph_executor.hpp"

#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::onnx {

GraphExecutor::GraphExecutor(Graph graph, const OpRegistry& registry) : graph_(std::move(graph)), registry_(&registry) {
  ops_.reserve(graph_.nodes.size());
  for (const NodeSpec& node : graph_.nodes) ops_.push_back(registry.create(node));
  find_parameters();
  plan_backward();
  plan_frees();
}

// A floating initializer read by a differentiable input of some op is trained; it moves
// out of the constants into a Parameter of its own (a copy: the caller's graph keeps its
// tensors).
void GraphExecutor::find_parameters() {
  for (std::size_t n = 0; n < graph_.nodes.size(); ++n) {
    const NodeSpec& node = graph_.nodes[n];
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& name = node.inputs[i];
      auto it = graph_.initializers.find(name);
      if (it == graph_.initializers.end() || !is_floating(it->second.type) || !ops_[n]->differentiable_input(i)) {
        continue;
      }
      parameters_.emplace_back(name, Parameter(it->second.tensor.clone()));
      parameter_by_name_[name] = &parameters_.back().second;
      graph_.initializers.erase(it);
    }
  }
}

// A gradient reaches a value from a floating graph input or a parameter through
// differentiable inputs; nodes none of whose inputs it reaches are skipped backward.
void GraphExecutor::plan_backward() {
  for (const GraphValue& input : graph_.inputs) {
    if (is_floating(input.type)) requires_grad_.insert(input.name);
  }
  for (const auto& entry : parameters_) requires_grad_.insert(entry.first);
  node_backward_.assign(graph_.nodes.size(), false);
  for (std::size_t n = 0; n < graph_.nodes.size(); ++n) {
    const NodeSpec& node = graph_.nodes[n];
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (requires_grad_.count(node.inputs[i]) != 0 && ops_[n]->differentiable_input(i)) node_backward_[n] = true;
    }
    if (!node_backward_[n]) continue;
    for (const std::string& out : node.outputs) {
      if (!out.empty()) requires_grad_.insert(out);
    }
  }
}

// Each value is dropped after its last reader, unless the graph returns it.
void GraphExecutor::plan_frees() {
  std::map<std::string, std::size_t> last_reader;
  for (std::size_t n = 0; n < graph_.nodes.size(); ++n) {
    for (const std::string& in : graph_.nodes[n].inputs) {
      if (!in.empty()) last_reader[in] = n;
    }
  }
  for (const GraphValue& output : graph_.outputs) last_reader.erase(output.name);
  frees_after_.assign(graph_.nodes.size(), {});
  for (const auto& entry : last_reader) frees_after_[entry.second].push_back(entry.first);
}

void GraphExecutor::split_over(const domain::Decomposition& decomposition, std::vector<SplitInput> inputs) {
  if (placement_) throw InvalidArgument(graph_.where() + " is already split over a decomposition");
  placement_ = std::make_unique<DomainPlacement>(decomposition, std::move(inputs), graph_.inputs, *registry_);
  placed_.assign(graph_.nodes.size(), false);
  forward_done_ = false;
}

std::string GraphExecutor::placement_summary() const {
  std::string out;
  for (std::size_t n = 0; n < graph_.nodes.size(); ++n) {
    const NodeSpec& node = graph_.nodes[n];
    const bool per_rank = !node.outputs.empty() && layout_of(node.outputs[0]).kind == Layout::Kind::per_rank;
    out += node.where() + ": " +
           (per_rank ? std::string("per rank (read off this rank's block)") : DomainPlacement::describe(*ops_[n])) + "\n";
  }
  return out;
}

Layout GraphExecutor::layout_of(const std::string& name) const {
  auto it = layouts_.find(name);
  return it == layouts_.end() ? Layout::whole() : it->second;
}

std::vector<Layout> GraphExecutor::input_layouts(const NodeSpec& node) const {
  std::vector<Layout> layouts;
  layouts.reserve(node.inputs.size());
  for (const std::string& in : node.inputs) {
    auto it = layouts_.find(in);
    layouts.push_back(it == layouts_.end() ? Layout::whole() : it->second);
  }
  return layouts;
}

Value GraphExecutor::input_value(const Value& given, const GraphValue& declared, const Shape& expected_shape) const {
  const std::string expected = std::string(element_type_name(declared.type)) + shape_str(expected_shape) +
                               (placement_ ? " (this rank's block)" : "");
  const std::string what = graph_.where() + ": input '" + declared.name + "'";
  if (!given.defined()) throw InvalidArgument(what + " expects " + expected + ", given nothing");
  if (given.tensor.device() != Device::host()) {
    throw UnsupportedError(what + " is given on " + given.tensor.device().str() +
                           "; imported ONNX graphs run on the host backend for now");
  }
  const bool floating_fits = is_floating(declared.type) && given.tensor.dtype() == storage_dtype(declared.type);
  const bool integer_fits = !is_floating(declared.type) && given.tensor.dtype() == DType::i64;
  if ((!floating_fits && !integer_fits) || given.shape() != expected_shape) {
    throw InvalidArgument(what + " expects " + expected + ", given " + given.tensor.str());
  }
  Value value;
  value.tensor = given.tensor.is_contiguous() ? given.tensor : given.tensor.contiguous();
  value.type = declared.type;
  return value;
}

const Value& GraphExecutor::lookup(const std::map<std::string, Value>& values, const std::string& name) const {
  if (auto it = values.find(name); it != values.end()) return it->second;
  if (auto it = graph_.initializers.find(name); it != graph_.initializers.end()) return it->second;
  throw InternalError(graph_.where() + ": the value '" + name + "' is not available when it is read");
}

std::vector<Value> GraphExecutor::forward(const std::vector<Value>& inputs) {
  if (inputs.size() != graph_.inputs.size()) {
    throw InvalidArgument(graph_.where() + " has " + std::to_string(graph_.inputs.size()) + " inputs, given " +
                          std::to_string(inputs.size()));
  }
  std::map<std::string, Value> values;
  layouts_.clear();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const GraphValue& declared = graph_.inputs[i];
    values[declared.name] = input_value(inputs[i], declared, placement_ ? placement_->local_input_shape(i) : declared.shape);
    if (placement_) layouts_[declared.name] = placement_->input_layout(i);
  }
  for (const auto& entry : parameters_) values[entry.first] = Value::floating(entry.second.value);
  forward_shapes_.clear();
  for (const auto& entry : values) forward_shapes_[entry.first] = entry.second.shape();
  for (std::size_t n = 0; n < graph_.nodes.size(); ++n) {
    const NodeSpec& node = graph_.nodes[n];
    std::vector<Value> node_inputs;
    node_inputs.reserve(node.inputs.size());
    for (const std::string& in : node.inputs) node_inputs.push_back(in.empty() ? Value{} : lookup(values, in));
    std::vector<Layout> layouts;
    if (placement_) {
      layouts = input_layouts(node);
      if (!placed_[n]) {
        ops_[n] = placement_->place(node, ops_[n], node_inputs, layouts);
        placed_[n] = true;
      }
    }
    std::vector<Value> outs = ops_[n]->forward(node_inputs);
    if (placement_) {
      const std::vector<Layout> out_layouts = placement_->output_layouts(*ops_[n], layouts, node.outputs.size());
      for (std::size_t k = 0; k < node.outputs.size(); ++k) {
        if (!node.outputs[k].empty()) layouts_[node.outputs[k]] = out_layouts[k];
      }
    }
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (k >= outs.size() || !outs[k].defined()) {
        throw InternalError(graph_.where() + ": " + node.where() + " did not compute its output '" +
                            node.outputs[k] + "'");
      }
      forward_shapes_[node.outputs[k]] = outs[k].shape();
      values[node.outputs[k]] = std::move(outs[k]);
    }
    for (const std::string& name : frees_after_[n]) {
      if (parameter_by_name_.count(name) == 0) values.erase(name);
    }
  }
  std::vector<Value> outputs;
  outputs.reserve(graph_.outputs.size());
  for (const GraphValue& output : graph_.outputs) {
    // A split run passes padding on as a layout, not as values: an output still padded
    // (or merged) is not this rank's block of anything the caller could use.
    const Layout layout = layout_of(output.name);
    if (layout.kind == Layout::Kind::padded || layout.kind == Layout::Kind::edge_slice ||
        layout.kind == Layout::Kind::flat) {
      throw UnsupportedError(graph_.where() + ": output '" + output.name + "' cannot run domain-parallel: it is " +
                             layout.str() + ", not a block of the field");
    }
    outputs.push_back(lookup(values, output.name));
  }
  forward_done_ = true;
  return outputs;
}

void GraphExecutor::accumulate(std::map<std::string, GradSlot>& grads, const std::string& name, const Tensor& grad,
                               const std::string& from) const {
  const Shape& shape = forward_shapes_.at(name);
  if (grad.shape() != shape) {
    throw InternalError(graph_.where() + ": " + from + " gives the gradient of '" + name + "' the shape " +
                        shape_str(grad.shape()) + ", the value's is " + shape_str(shape));
  }
  auto it = grads.find(name);
  if (it == grads.end()) {
    grads[name] = GradSlot{grad, false};
    return;
  }
  GradSlot& slot = it->second;
  if (!slot.owned) {  // never add into a tensor an op or the caller may still hold
    slot.grad = slot.grad.clone();
    slot.owned = true;
  }
  ops::axpy(1.0, grad, slot.grad);
}

std::vector<Tensor> GraphExecutor::backward(const std::vector<Tensor>& grad_outputs) {
  if (!forward_done_) throw InvalidArgument(graph_.where() + ": backward called before forward");
  if (grad_outputs.size() != graph_.outputs.size()) {
    throw InvalidArgument(graph_.where() + " has " + std::to_string(graph_.outputs.size()) + " outputs, given " +
                          std::to_string(grad_outputs.size()) + " output gradients");
  }
  std::map<std::string, GradSlot> grads;
  for (std::size_t k = 0; k < grad_outputs.size(); ++k) {
    const std::string& name = graph_.outputs[k].name;
    if (grad_outputs[k].defined() && requires_grad_.count(name) != 0) {
      accumulate(grads, name, grad_outputs[k], "the gradient given for output '" + name + "'");
    }
  }
  for (std::size_t n = graph_.nodes.size(); n-- > 0;) {
    if (!node_backward_[n]) continue;
    const NodeSpec& node = graph_.nodes[n];
    std::vector<Tensor> grad_outs(node.outputs.size());
    bool any = false;
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      auto it = grads.find(node.outputs[k]);
      if (it == grads.end()) continue;
      grad_outs[k] = it->second.grad;
      any = true;
      grads.erase(it);
    }
    if (!any) continue;
    const std::vector<Tensor> grad_ins = ops_[n]->backward(grad_outs);
    for (std::size_t i = 0; i < node.inputs.size() && i < grad_ins.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty() || !grad_ins[i].defined() || requires_grad_.count(in) == 0 || !ops_[n]->differentiable_input(i)) {
        continue;
      }
      accumulate(grads, in, grad_ins[i], node.where());
    }
  }
  for (auto& entry : parameters_) {
    auto it = grads.find(entry.first);
    if (it != grads.end()) ops::axpy(1.0, it->second.grad, entry.second.grad);
  }
  std::vector<Tensor> grad_inputs;
  for (const GraphValue& input : graph_.inputs) {
    auto it = grads.find(input.name);
    if (it != grads.end()) {
      grad_inputs.push_back(it->second.grad);
    } else if (is_floating(input.type)) {
      grad_inputs.push_back(Tensor::zeros(forward_shapes_.at(input.name), storage_dtype(input.type)));
    } else {
      grad_inputs.emplace_back();
    }
  }
  return grad_inputs;
}

}  // namespace tessera::onnx
