// Reading and writing ONNX files: the one source of tessera that includes ONNX's
// protobuf classes. It turns a ModelProto into a Graph (graph.hpp), which holds no
// protobuf type, and writes trained initializers back into a copy of the file.
//
// Every size the file states is checked before memory is allocated for it: a tensor's
// dims (negative, or a product overflowing int64), its data against its dims, external
// data against the file that holds it. A hostile file is an error naming the file and
// the tensor, node, value or input at fault.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "onnx/graph.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"

namespace tessera::onnx {

namespace {

namespace fs = std::filesystem;
using TensorProto = ::onnx::TensorProto;

// --- Element types ----------------------------------------------------------------

std::string onnx_type_name(int data_type) {
  switch (data_type) {
    case 1: return "float";
    case 2: return "uint8";
    case 3: return "int8";
    case 4: return "uint16";
    case 5: return "int16";
    case 6: return "int32";
    case 7: return "int64";
    case 8: return "string";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "double";
    case 12: return "uint32";
    case 13: return "uint64";
    case 14: return "complex64";
    case 15: return "complex128";
    case 16: return "bfloat16";
    default: return "unknown element type " + std::to_string(data_type);
  }
}

std::optional<ElementType> element_type_of(int data_type) {
  for (ElementType t : {ElementType::f32, ElementType::f64, ElementType::i64, ElementType::i32, ElementType::i16,
                        ElementType::i8, ElementType::u8, ElementType::boolean}) {
    if (onnx_data_type(t) == data_type) return t;
  }
  return std::nullopt;
}

// The element type `data_type` of `what`: UnsupportedError for an ONNX type tessera does
// not run (float16, string, ...), InvalidArgument for a number ONNX does not define.
ElementType require_element_type(int data_type, const std::string& what) {
  if (auto t = element_type_of(data_type)) return *t;
  if (data_type >= 1 && data_type <= 16) {
    throw UnsupportedError(what + " has the element type " + onnx_type_name(data_type) +
                           ", which tessera does not run (float, double, int64, int32, int16, int8, uint8, bool)");
  }
  throw InvalidArgument(what + " has an invalid element type (" + std::to_string(data_type) + ")");
}

std::int64_t stored_element_size(ElementType type) {
  switch (type) {
    case ElementType::f64:
    case ElementType::i64: return 8;
    case ElementType::f32:
    case ElementType::i32: return 4;
    case ElementType::i16: return 2;
    default: return 1;
  }
}

// --- Tensors ----------------------------------------------------------------------

Shape checked_dims(const TensorProto& tensor, const std::string& what) {
  Shape shape(tensor.dims().begin(), tensor.dims().end());
  (void)detail::checked_numel(shape, what);  // negative dims, overflowing products
  return shape;
}

std::string external_field(const TensorProto& tensor, const std::string& key) {
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == key) return entry.value();
  }
  return {};
}

std::int64_t parse_size_field(const std::string& text, const std::string& key, const std::string& what) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || v < 0) {
    throw InvalidArgument(what + ": the external data's " + key + " '" + text + "' is not a size");
  }
  return v;
}

// The file that holds `what`'s external data: a relative path inside the model's folder,
// lexically and after resolving links (a link must not lead out of the folder either).
fs::path external_data_path(const std::string& location, const fs::path& folder, const std::string& what) {
  if (location.empty()) throw InvalidArgument(what + " is stored as external data without a location");
  if (location.find('\0') != std::string::npos) {
    throw InvalidArgument(what + ": the external data path holds a NUL byte");
  }
  const fs::path relative(location);
  if (relative.is_absolute() || relative.has_root_name() || relative.has_root_directory()) {
    throw InvalidArgument(what + ": the external data path '" + location +
                          "' is absolute; tessera reads external data only from the model's folder");
  }
  for (const fs::path& part : relative) {
    if (part == "..") {
      throw InvalidArgument(what + ": the external data path '" + location +
                            "' leaves the model's folder; tessera reads external data only from there");
    }
  }
  fs::path base, full;
  try {
    base = fs::weakly_canonical(folder);
    full = fs::weakly_canonical(folder / relative);
  } catch (const fs::filesystem_error& e) {
    throw InvalidArgument(what + ": the external data path '" + location + "' cannot be resolved: " + e.what());
  }
  const auto mismatch = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (mismatch.first != base.end()) {
    throw InvalidArgument(what + ": the external data path '" + location +
                          "' resolves outside the model's folder (through a link)");
  }
  return full;
}

// `expected_bytes` bytes of `what`'s external data, at the offset the tensor names.
std::string read_external_data(const TensorProto& tensor, const fs::path& folder, std::int64_t expected_bytes,
                               const std::string& what) {
  const fs::path file = external_data_path(external_field(tensor, "location"), folder, what);
  const std::string offset_text = external_field(tensor, "offset");
  const std::string length_text = external_field(tensor, "length");
  const std::int64_t offset = offset_text.empty() ? 0 : parse_size_field(offset_text, "offset", what);
  if (!length_text.empty() && parse_size_field(length_text, "length", what) != expected_bytes) {
    throw InvalidArgument(what + ": the external data's length " + length_text + " does not match its dims (" +
                          std::to_string(expected_bytes) + " bytes)");
  }
  detail::require_regular_file(file.string(), what + "'s external data");
  const auto file_size = static_cast<std::int64_t>(fs::file_size(file));
  if (detail::checked_add(offset, expected_bytes, what) > file_size) {
    throw InvalidArgument(what + ": its external data needs bytes " + std::to_string(offset) + " to " +
                          std::to_string(offset + expected_bytes) + " of '" + file.string() + "', which has " +
                          std::to_string(file_size));
  }
  std::ifstream in(file, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(expected_bytes), '\0');
  in.seekg(offset);
  in.read(bytes.data(), expected_bytes);
  if (!in) throw IoError(what + ": could not read its external data from '" + file.string() + "'");
  return bytes;
}

bool is_external(const TensorProto& tensor) {
  return tensor.data_location() == TensorProto::EXTERNAL;
}

// The tensor's elements as little-endian raw bytes, when it stores them so (raw_data or
// external data); nullopt when it uses the typed fields.
std::optional<std::string> raw_bytes(const TensorProto& tensor, const fs::path& folder, std::int64_t expected_bytes,
                                     const std::string& what) {
  if (is_external(tensor)) return read_external_data(tensor, folder, expected_bytes, what);
  if (!tensor.has_raw_data()) return std::nullopt;
  if (static_cast<std::int64_t>(tensor.raw_data().size()) != expected_bytes) {
    throw InvalidArgument(what + " has " + std::to_string(tensor.raw_data().size()) +
                          " bytes of raw_data where its dims need " + std::to_string(expected_bytes));
  }
  return tensor.raw_data();
}

void require_count(std::int64_t given, std::int64_t numel, const char* field, const std::string& what) {
  if (given != numel) {
    throw InvalidArgument(what + " has " + std::to_string(given) + " elements in " + field + " where its dims need " +
                          std::to_string(numel));
  }
}

template <class T, class Field>
Value floating_value(const std::optional<std::string>& raw, const Field& typed, const Shape& shape,
                     std::int64_t numel, const char* field, const std::string& what) {
  if (!raw) require_count(typed.size(), numel, field, what);
  Tensor tensor = Tensor::empty(shape, dtype_of<T>);
  if (numel == 0) return Value::floating(tensor);
  if (raw) {
    std::memcpy(tensor.data<T>(), raw->data(), raw->size());
  } else {
    std::copy(typed.begin(), typed.end(), tensor.data<T>());
  }
  return Value::floating(tensor);
}

template <class Stored>
std::vector<std::int64_t> decode_raw_integers(const std::string& raw, std::int64_t numel) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel));
  for (std::int64_t k = 0; k < numel; ++k) {
    Stored v;
    std::memcpy(&v, raw.data() + k * static_cast<std::int64_t>(sizeof(Stored)), sizeof(Stored));
    out[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(v);
  }
  return out;
}

std::vector<std::int64_t> integer_elements(const TensorProto& tensor, ElementType type,
                                           const std::optional<std::string>& raw, std::int64_t numel,
                                           const std::string& what) {
  if (raw) {
    switch (type) {
      case ElementType::i64: return decode_raw_integers<std::int64_t>(*raw, numel);
      case ElementType::i32: return decode_raw_integers<std::int32_t>(*raw, numel);
      case ElementType::i16: return decode_raw_integers<std::int16_t>(*raw, numel);
      case ElementType::i8: return decode_raw_integers<std::int8_t>(*raw, numel);
      case ElementType::u8: return decode_raw_integers<std::uint8_t>(*raw, numel);
      default: {
        std::vector<std::int64_t> out = decode_raw_integers<std::uint8_t>(*raw, numel);
        for (std::int64_t& v : out) v = v != 0;  // bool
        return out;
      }
    }
  }
  if (type == ElementType::i64) {
    require_count(tensor.int64_data_size(), numel, "int64_data", what);
    return {tensor.int64_data().begin(), tensor.int64_data().end()};
  }
  require_count(tensor.int32_data_size(), numel, "int32_data", what);
  std::vector<std::int64_t> out(tensor.int32_data().begin(), tensor.int32_data().end());
  if (type == ElementType::boolean) {
    for (std::int64_t& v : out) v = v != 0;
  }
  return out;
}

// A TensorProto as a Value. `what` names it ("model 'm.onnx': initializer 'w'"); external
// data is looked for in `folder`.
Value to_value(const TensorProto& tensor, const fs::path& folder, const std::string& what) {
  if (tensor.has_segment()) throw UnsupportedError(what + " is stored in segments, which tessera does not read");
  const ElementType type = require_element_type(tensor.data_type(), what);
  const Shape shape = checked_dims(tensor, what);
  const std::int64_t numel = detail::checked_numel(shape, what);
  const std::int64_t bytes = detail::checked_mul(numel, stored_element_size(type), what);
  const std::optional<std::string> raw = raw_bytes(tensor, folder, bytes, what);
  if (type == ElementType::f32) return floating_value<float>(raw, tensor.float_data(), shape, numel, "float_data", what);
  if (type == ElementType::f64) {
    return floating_value<double>(raw, tensor.double_data(), shape, numel, "double_data", what);
  }
  return Value::integers(integer_elements(tensor, type, raw, numel, what), shape, type);
}

// --- Files ------------------------------------------------------------------------

fs::path folder_of(const std::string& path) {
  const fs::path folder = fs::path(path).parent_path();
  return folder.empty() ? fs::path(".") : folder;
}

template <class Message>
void parse_message(Message& message, std::string_view bytes, const std::string& what) {
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw UnsupportedError(what + " is larger than 2 GiB, protobuf's limit (store large tensors as external data)");
  }
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw InvalidArgument(what + " is not a valid ONNX protobuf (truncated or not an ONNX file)");
  }
}

// --- Attributes -------------------------------------------------------------------

using AttributeProto = ::onnx::AttributeProto;

// The attribute's kind; files from old exporters leave `type` unset, so the field that
// is present decides there.
AttributeProto::AttributeType attribute_type(const AttributeProto& a) {
  if (a.type() != AttributeProto::UNDEFINED) return a.type();
  if (a.has_f()) return AttributeProto::FLOAT;
  if (a.has_i()) return AttributeProto::INT;
  if (a.has_s()) return AttributeProto::STRING;
  if (a.has_t()) return AttributeProto::TENSOR;
  if (a.has_g()) return AttributeProto::GRAPH;
  if (a.floats_size()) return AttributeProto::FLOATS;
  if (a.ints_size()) return AttributeProto::INTS;
  if (a.strings_size()) return AttributeProto::STRINGS;
  if (a.graphs_size()) return AttributeProto::GRAPHS;
  return AttributeProto::UNDEFINED;
}

Attribute to_attribute(const AttributeProto& a, const fs::path& folder, const std::string& what) {
  Attribute out;
  switch (attribute_type(a)) {
    case AttributeProto::FLOAT: out.kind = Attribute::Kind::real; out.f = a.f(); break;
    case AttributeProto::INT: out.kind = Attribute::Kind::integer; out.i = a.i(); break;
    case AttributeProto::STRING: out.kind = Attribute::Kind::string; out.s = a.s(); break;
    case AttributeProto::TENSOR: out.kind = Attribute::Kind::tensor; out.t = to_value(a.t(), folder, what); break;
    case AttributeProto::FLOATS:
      out.kind = Attribute::Kind::reals;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case AttributeProto::INTS:
      out.kind = Attribute::Kind::integers;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case AttributeProto::STRINGS:
      out.kind = Attribute::Kind::strings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case AttributeProto::GRAPH:
    case AttributeProto::GRAPHS:
      throw UnsupportedError(what + " is a subgraph (control flow: If, Loop, Scan), which tessera does not run");
    default:
      throw UnsupportedError(what + " is of a kind tessera does not read (sparse tensors, tensor lists, types)");
  }
  return out;
}

// --- The graph --------------------------------------------------------------------

std::map<std::string, int> read_opsets(const ::onnx::ModelProto& model, const std::string& where) {
  std::map<std::string, int> opsets;
  for (const auto& entry : model.opset_import()) {
    const std::string domain = entry.domain() == "ai.onnx" ? std::string() : entry.domain();
    if (entry.version() < 1 || entry.version() > std::numeric_limits<int>::max()) {
      throw InvalidArgument(where + ": the opset version " + std::to_string(entry.version()) + " of domain '" +
                            domain + "' is invalid");
    }
    opsets[domain] = static_cast<int>(entry.version());
  }
  return opsets;  // a default-domain opset is required of files with default-domain nodes (to_node)
}

NodeSpec to_node(const ::onnx::NodeProto& proto, std::size_t index, const std::map<std::string, int>& opsets,
                 const fs::path& folder, const std::string& where) {
  NodeSpec node;
  node.op_type = proto.op_type();
  node.name = proto.name().empty() ? proto.op_type() + "_" + std::to_string(index) : proto.name();
  auto opset = opsets.find("");
  node.opset = opset == opsets.end() ? 0 : opset->second;
  const std::string at = where + ": " + node.where();
  if (node.op_type.empty()) throw InvalidArgument(where + ": node " + std::to_string(index) + " has no op_type");
  if (!proto.domain().empty() && proto.domain() != "ai.onnx") {
    throw UnsupportedError(at + " is in the domain '" + proto.domain() +
                           "'; tessera runs only ONNX's default domain");
  }
  if (opset == opsets.end()) {
    throw InvalidArgument(at + ": the model imports no opset of ONNX's default domain, which the node is in");
  }
  node.inputs.assign(proto.input().begin(), proto.input().end());
  node.outputs.assign(proto.output().begin(), proto.output().end());
  for (const AttributeProto& a : proto.attribute()) {
    const std::string what = at + ": attribute '" + a.name() + "'";
    if (!a.ref_attr_name().empty()) throw UnsupportedError(what + " refers to a function's attribute");
    if (!node.attributes.emplace(a.name(), to_attribute(a, folder, what)).second) {
      throw InvalidArgument(what + " is given twice");
    }
  }
  return node;
}

// The declared element type and dims of a graph input or output; a dim is nullopt where
// it is symbolic or unset.
struct DeclaredType {
  ElementType type = ElementType::f32;
  std::vector<std::optional<std::int64_t>> dims;
  std::vector<std::string> dim_names;
  bool has_shape = false;
};

DeclaredType declared_type(const ::onnx::ValueInfoProto& info, const std::string& what) {
  if (!info.type().has_tensor_type()) throw UnsupportedError(what + " is not a tensor (sequences and maps are not run)");
  const auto& tensor_type = info.type().tensor_type();
  DeclaredType out;
  out.type = require_element_type(tensor_type.elem_type(), what);
  out.has_shape = tensor_type.has_shape();
  for (const auto& dim : tensor_type.shape().dim()) {
    if (dim.has_dim_value() && dim.dim_value() < 0) {
      throw InvalidArgument(what + " has the negative dim " + std::to_string(dim.dim_value()));
    }
    out.dims.push_back(dim.has_dim_value() ? std::optional<std::int64_t>(dim.dim_value()) : std::nullopt);
    out.dim_names.push_back(dim.has_dim_param() ? dim.dim_param() : std::string());
  }
  return out;
}

// An input's static shape: the file's, or the caller's where the file's has a symbolic
// dim (the caller's must agree with the file's static dims).
const Shape* given_shape(const std::string& name, std::size_t position, const ReadOptions& options) {
  auto given = options.input_shapes.find(name);
  if (given != options.input_shapes.end()) return &given->second;
  if (position < options.input_shapes_in_order.size()) return &options.input_shapes_in_order[position];
  return nullptr;
}

Shape input_shape(const DeclaredType& declared, const Shape* given, const ReadOptions& options,
                  const std::string& what) {
  if (given != nullptr) {
    const Shape& shape = *given;
    bool agrees = !declared.has_shape || shape.size() == declared.dims.size();
    for (std::size_t d = 0; agrees && declared.has_shape && d < shape.size(); ++d) {
      agrees = shape[d] >= 0 && (!declared.dims[d] || *declared.dims[d] == shape[d]);
    }
    if (!agrees) throw InvalidArgument(what + ": the shape given for it, " + shape_str(shape) + ", does not fit the file's");
    (void)detail::checked_numel(shape, what);
    return shape;
  }
  if (!declared.has_shape) {
    if (options.defer_symbolic_inputs) return {};
    throw UnsupportedError(what + " has no shape in the file: give it in the load options' input shapes");
  }
  Shape shape;
  for (std::size_t d = 0; d < declared.dims.size(); ++d) {
    if (!declared.dims[d] && options.defer_symbolic_inputs) {
      shape.push_back(-1);
      continue;
    }
    if (!declared.dims[d]) {
      const std::string symbol = declared.dim_names[d].empty() ? "unnamed" : "'" + declared.dim_names[d] + "'";
      throw UnsupportedError(what + " has the symbolic dim " + std::to_string(d) + " (" + symbol +
                             "): tessera runs static shapes, give the input's shape in the load options");
    }
    shape.push_back(*declared.dims[d]);
  }
  if (std::find(shape.begin(), shape.end(), -1) == shape.end()) (void)detail::checked_numel(shape, what);
  return shape;
}

void read_initializers(const ::onnx::GraphProto& proto, const fs::path& folder, const std::string& where,
                       Graph& graph) {
  if (proto.sparse_initializer_size() > 0) throw UnsupportedError(where + " has sparse initializers");
  for (const TensorProto& tensor : proto.initializer()) {
    const std::string what = where + ": initializer '" + tensor.name() + "'";
    if (tensor.name().empty()) throw InvalidArgument(where + ": an initializer has no name");
    if (!graph.initializers.emplace(tensor.name(), to_value(tensor, folder, what)).second) {
      throw InvalidArgument(what + " is given twice");
    }
  }
}

void read_inputs_and_outputs(const ::onnx::GraphProto& proto, const ReadOptions& options, const std::string& where,
                             Graph& graph) {
  std::set<std::string> named;
  for (const auto& info : proto.input()) {
    const std::string what = where + ": input '" + info.name() + "'";
    if (graph.initializers.count(info.name()) != 0) continue;  // an initializer listed as an input: a constant
    const DeclaredType declared = declared_type(info, what);
    const Shape* given = given_shape(info.name(), graph.inputs.size(), options);
    GraphValue input{info.name(), declared.type, input_shape(declared, given, options, what), true};
    input.shape_known = given != nullptr || std::find(input.shape.begin(), input.shape.end(), -1) == input.shape.end();
    input.shape_known = input.shape_known && (given != nullptr || declared.has_shape);
    graph.inputs.push_back(input);
    named.insert(info.name());
  }
  for (const auto& entry : options.input_shapes) {
    if (named.count(entry.first) == 0) {
      throw InvalidArgument(where + ": a shape is given for '" + entry.first + "', which is not an input of the graph");
    }
  }
  for (const auto& info : proto.output()) {
    const DeclaredType declared = declared_type(info, where + ": output '" + info.name() + "'");
    GraphValue output{info.name(), declared.type, {}, declared.has_shape};
    for (const auto& dim : declared.dims) {
      output.shape_known = output.shape_known && dim.has_value();
      output.shape.push_back(dim.value_or(-1));
    }
    graph.outputs.push_back(output);
  }
  if (graph.outputs.empty()) throw InvalidArgument(where + " has no graph output");
}

}  // namespace

bool onnx_file_support() noexcept { return true; }

Graph parse_onnx_model(std::string_view bytes, const std::string& path, const ReadOptions& options) {
  const std::string where = "model '" + path + "'";
  ::onnx::ModelProto model;
  parse_message(model, bytes, where);
  if (!model.has_graph()) throw InvalidArgument(where + " has no graph (not an ONNX model file?)");
  Graph graph;
  graph.source = path;
  graph.opsets = read_opsets(model, where);
  const fs::path folder = folder_of(path);
  read_initializers(model.graph(), folder, where, graph);
  read_inputs_and_outputs(model.graph(), options, where, graph);
  for (int n = 0; n < model.graph().node_size(); ++n) {
    graph.nodes.push_back(to_node(model.graph().node(n), static_cast<std::size_t>(n), graph.opsets, folder, where));
  }
  sort_and_check_graph(graph);
  return graph;
}

Graph read_onnx_file(const std::string& path, const ReadOptions& options) {
  const std::string bytes = detail::read_regular_file(path, "the ONNX model");
  return parse_onnx_model(bytes, path, options);
}

Value read_tensor_file(const std::string& path) {
  const std::string bytes = detail::read_regular_file(path, "the ONNX tensor file");
  TensorProto tensor;
  parse_message(tensor, bytes, "the tensor file '" + path + "'");
  return to_value(tensor, folder_of(path), "the tensor file '" + path + "'");
}

// --- Writing initializers back ------------------------------------------------------

namespace {

void replace_initializer(TensorProto& tensor, const Tensor& value, const std::string& what) {
  const std::optional<ElementType> type = element_type_of(tensor.data_type());
  const bool dtype_fits = (type == ElementType::f32 && value.dtype() == DType::f32) ||
                          (type == ElementType::f64 && value.dtype() == DType::f64);
  if (!dtype_fits) {
    throw InvalidArgument(what + " is " + onnx_type_name(tensor.data_type()) + " in the file, the new value is " +
                          value.str());
  }
  const Shape dims(tensor.dims().begin(), tensor.dims().end());
  if (dims != value.shape()) {
    throw InvalidArgument(what + " has the shape " + shape_str(dims) + " in the file, the new value " +
                          shape_str(value.shape()));
  }
  const Tensor host = value.to(Device::host()).contiguous();
  tensor.clear_float_data();
  tensor.clear_double_data();
  tensor.clear_external_data();
  tensor.set_data_location(TensorProto::DEFAULT);
  tensor.set_raw_data(host.data(), host.nbytes());
}

// External data not replaced is copied in: the new file may live in another folder.
void inline_external_data(TensorProto& tensor, const fs::path& folder, const std::string& what) {
  const ElementType type = require_element_type(tensor.data_type(), what);
  const std::int64_t bytes =
      detail::checked_mul(detail::checked_numel(checked_dims(tensor, what), what), stored_element_size(type), what);
  std::string data = read_external_data(tensor, folder, bytes, what);
  tensor.clear_external_data();
  tensor.set_data_location(TensorProto::DEFAULT);
  tensor.set_raw_data(std::move(data));
}

void write_atomically(const ::onnx::ModelProto& model, const std::string& out_path) {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    throw IoError("could not serialize the ONNX model for '" + out_path + "' (larger than protobuf's 2 GiB?)");
  }
  const std::string temporary = out_path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw IoError("could not write the ONNX model '" + temporary + "'");
    }
  }
  std::error_code ec;
  fs::rename(temporary, out_path, ec);
  if (ec) {
    fs::remove(temporary, ec);
    throw IoError("could not rename '" + temporary + "' to '" + out_path + "': " + ec.message());
  }
}

}  // namespace

void save_onnx_with_initializers(const std::string& in_path, const std::string& out_path,
                                 const std::map<std::string, Tensor>& values) {
  const std::string where = "model '" + in_path + "'";
  const std::string bytes = detail::read_regular_file(in_path, "the ONNX model");
  ::onnx::ModelProto model;
  parse_message(model, bytes, where);
  std::set<std::string> replaced;
  for (TensorProto& tensor : *model.mutable_graph()->mutable_initializer()) {
    const std::string what = where + ": initializer '" + tensor.name() + "'";
    auto it = values.find(tensor.name());
    if (it != values.end()) {
      replace_initializer(tensor, it->second, what);
      replaced.insert(tensor.name());
    } else if (is_external(tensor)) {
      inline_external_data(tensor, folder_of(in_path), what);
    }
  }
  for (const auto& entry : values) {
    if (replaced.count(entry.first) == 0) {
      throw InvalidArgument(where + " has no initializer '" + entry.first + "' to write the new value into");
    }
  }
  write_atomically(model, out_path);
}

}  // namespace tessera::onnx
