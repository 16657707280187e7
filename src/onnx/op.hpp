#pragma once
// One ONNX node as tessera runs it: its attributes (NodeSpec), the operator that computes
// it forward and backward (Op), and the table that makes an Op from a node (OpRegistry).
//
// An Op follows nn::Module's contract on a graph edge: forward caches what backward
// needs; backward takes the gradients of the outputs and returns the gradients of the
// inputs. Ops are written once per family (ops_<family>.cpp), each family adding its
// operators to the registry through its register_<family>_ops function below.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "onnx/value.hpp"

namespace tessera::onnx {

// An attribute of a node, by kind (AttributeProto.type).
struct Attribute {
  enum class Kind : std::uint8_t { integer, real, string, integers, reals, strings, tensor };
  Kind kind = Kind::integer;
  std::int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  Value t;
};

struct NodeSpec {
  std::string name;     // the node's name in the file ("/conv1/Conv"); "<op>_<index>" when unnamed
  std::string op_type;  // "Conv"
  int opset = 0;        // the model's opset for the node's domain
  std::vector<std::string> inputs;   // value names; "" for an omitted optional input
  std::vector<std::string> outputs;  // value names; "" for an omitted optional output
  std::map<std::string, Attribute> attributes;

  // "node '/conv1/Conv' (Conv, opset 13)": how every message names the node.
  std::string where() const;
  bool has(const std::string& key) const { return attributes.count(key) != 0; }
  // Typed attribute reads: the fallback when absent; InvalidArgument naming the node and
  // the key when present with another kind.
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::int64_t> get_ints(const std::string& key,
                                     const std::vector<std::int64_t>& fallback = {}) const;
  std::vector<double> get_floats(const std::string& key,
                                 const std::vector<double>& fallback = {}) const;
  const Value* get_tensor(const std::string& key) const;  // nullptr when absent
  // Required attributes: InvalidArgument naming the node and the key when absent.
  std::int64_t require_int(const std::string& key) const;
  std::vector<std::int64_t> require_ints(const std::string& key) const;

  // UnsupportedError "<where>: <what> is not supported" (an attribute value, an input
  // type, an opset): the op exists but not this use of it.
  [[noreturn]] void unsupported(const std::string& what) const;
  // InvalidArgument "<where>: <what>": the node is malformed (wrong input count, shapes
  // that do not agree, an attribute out of range).
  [[noreturn]] void invalid(const std::string& what) const;
};

class Op {
 public:
  explicit Op(NodeSpec node) : node_(std::move(node)) {}
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  virtual ~Op() = default;

  // The node's outputs from its inputs (an omitted optional input is an undefined
  // Value). Caches what backward needs.
  virtual std::vector<Value> forward(const std::vector<Value>& inputs) = 0;
  // Whether a gradient flows to input `index` (false for shapes, indices, axes, masks,
  // scales; backward returns an undefined Tensor there).
  virtual bool differentiable_input(std::size_t index) const { (void)index; return true; }
  // The gradients of the inputs from those of the outputs, after one forward. An
  // undefined grad_outputs[i] means zero (the output is unused). The default refuses
  // ("<where>: backward is not supported"): an op that is only ever folded or run
  // forward need not differentiate.
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs);

  const NodeSpec& node() const { return node_; }

 protected:
  NodeSpec node_;
};

using OpFactory = std::function<std::unique_ptr<Op>(const NodeSpec&)>;

// op_type -> factory. A factory refuses (NodeSpec::unsupported) the opsets and attribute
// combinations it does not implement, so the one table is the supported set.
class OpRegistry {
 public:
  void add(const std::string& op_type, OpFactory factory);
  bool contains(const std::string& op_type) const { return factories_.count(op_type) != 0; }
  // UnsupportedError naming the node, the op and the opset for an op outside the table.
  std::unique_ptr<Op> create(const NodeSpec& node) const;
  std::vector<std::string> op_types() const;  // sorted

 private:
  std::map<std::string, OpFactory> factories_;
};

// The registry of every op tessera runs (built once, from the families below).
const OpRegistry& builtin_ops();

// The families (one file each).
void register_unary_ops(OpRegistry& registry);        // ops_unary.cpp: functions of one input, the activations
void register_elementwise_ops(OpRegistry& registry);  // ops_elementwise.cpp: arithmetic, comparisons, Where, Cast, Clip, Identity, Dropout
void register_reduce_norm_ops(OpRegistry& registry);  // ops_reduce_norm.cpp: Reduce*, Softmax, LogSoftmax, the normalizations
void register_linear_conv_ops(OpRegistry& registry);  // ops_linear_conv.cpp: Gemm, MatMul, Conv, ConvTranspose
void register_pool_resize_ops(OpRegistry& registry);  // ops_pool_resize.cpp: MaxPool, AveragePool, GlobalAveragePool, Pad, Resize, Upsample
void register_shape_ops(OpRegistry& registry);        // ops_shape.cpp: Reshape, Transpose, Concat, Split, Slice, Gather, ...
void register_constant_ops(OpRegistry& registry);     // ops_constant.cpp: Shape, Size, Constant, ConstantOfShape, Range

}  // namespace tessera::onnx
