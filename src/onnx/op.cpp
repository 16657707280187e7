#include "onnx/op.hpp"

#include "tessera/error.hpp"

namespace tessera::onnx {

namespace {

std::string_view kind_name(Attribute::Kind kind) {
  switch (kind) {
    case Attribute::Kind::integer: return "an integer";
    case Attribute::Kind::real: return "a float";
    case Attribute::Kind::string: return "a string";
    case Attribute::Kind::integers: return "a list of integers";
    case Attribute::Kind::reals: return "a list of floats";
    case Attribute::Kind::strings: return "a list of strings";
    case Attribute::Kind::tensor: return "a tensor";
  }
  return "unknown";
}

// The attribute `key` when present, checked to be of `kind`.
const Attribute* find_attribute(const NodeSpec& node, const std::string& key, Attribute::Kind kind) {
  auto it = node.attributes.find(key);
  if (it == node.attributes.end()) return nullptr;
  if (it->second.kind != kind) {
    node.invalid("attribute '" + key + "' must be " + std::string(kind_name(kind)) + ", the file gives " +
                 std::string(kind_name(it->second.kind)));
  }
  return &it->second;
}

}  // namespace

std::string NodeSpec::where() const {
  return "node '" + name + "' (" + op_type + ", opset " + std::to_string(opset) + ")";
}

std::int64_t NodeSpec::get_int(const std::string& key, std::int64_t fallback) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::integer);
  return a ? a->i : fallback;
}

double NodeSpec::get_float(const std::string& key, double fallback) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::real);
  return a ? a->f : fallback;
}

std::string NodeSpec::get_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::string);
  return a ? a->s : fallback;
}

std::vector<std::int64_t> NodeSpec::get_ints(const std::string& key,
                                             const std::vector<std::int64_t>& fallback) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::integers);
  return a ? a->ints : fallback;
}

std::vector<double> NodeSpec::get_floats(const std::string& key, const std::vector<double>& fallback) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::reals);
  return a ? a->floats : fallback;
}

const Value* NodeSpec::get_tensor(const std::string& key) const {
  const Attribute* a = find_attribute(*this, key, Attribute::Kind::tensor);
  return a ? &a->t : nullptr;
}

std::int64_t NodeSpec::require_int(const std::string& key) const {
  if (!has(key)) invalid("the required attribute '" + key + "' is missing");
  return get_int(key, 0);
}

std::vector<std::int64_t> NodeSpec::require_ints(const std::string& key) const {
  if (!has(key)) invalid("the required attribute '" + key + "' is missing");
  return get_ints(key);
}

void NodeSpec::unsupported(const std::string& what) const {
  throw UnsupportedError(where() + ": " + what + " is not supported");
}

void NodeSpec::invalid(const std::string& what) const { throw InvalidArgument(where() + ": " + what); }

std::vector<Tensor> Op::backward(const std::vector<Tensor>& grad_outputs) {
  (void)grad_outputs;
  node_.unsupported("backward");
}

void OpRegistry::add(const std::string& op_type, OpFactory factory) {
  if (!factories_.emplace(op_type, std::move(factory)).second) {
    throw InternalError("onnx::OpRegistry: op '" + op_type + "' registered twice");
  }
}

std::unique_ptr<Op> OpRegistry::create(const NodeSpec& node) const {
  auto it = factories_.find(node.op_type);
  if (it == factories_.end()) {
    throw UnsupportedError(node.where() + ": the op " + node.op_type +
                           " is not supported (docs/onnx.md lists the ops tessera runs)");
  }
  return it->second(node);
}

std::vector<std::string> OpRegistry::op_types() const {
  std::vector<std::string> names;
  for (const auto& entry : factories_) names.push_back(entry.first);
  return names;
}

const OpRegistry& builtin_ops() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_unary_ops(r);
    register_elementwise_ops(r);
    register_reduce_norm_ops(r);
    register_linear_conv_ops(r);
    register_pool_resize_ops(r);
    register_shape_ops(r);
    register_constant_ops(r);
    return r;
  }();
  return registry;
}

}  // namespace tessera::onnx
