#pragma once
// ONNX files for the reader's tests, written with ONNX's own protobuf classes (the tests
// may include them; in the library only onnx_file.cpp does), in a temporary folder that
// is removed afterwards.

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera::onnx::test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("tessera_onnx_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline ::onnx::TensorProto float_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                        const std::vector<float>& values, bool raw = true) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(::onnx::TensorProto::FLOAT);
  for (std::int64_t d : dims) t.add_dims(d);
  if (raw) {
    t.set_raw_data(values.data(), values.size() * sizeof(float));
  } else {
    for (float v : values) t.add_float_data(v);
  }
  return t;
}

inline void add_node(::onnx::GraphProto& graph, const std::string& op, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& outputs, const std::string& name = "") {
  ::onnx::NodeProto* node = graph.add_node();
  node->set_op_type(op);
  node->set_name(name);
  for (const auto& in : inputs) node->add_input(in);
  for (const auto& out : outputs) node->add_output(out);
}

// A tensor value info; a negative dim is symbolic ("batch").
inline void add_value_info(::google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>* list,
                           const std::string& name, int elem_type, const std::vector<std::int64_t>& dims) {
  ::onnx::ValueInfoProto* info = list->Add();
  info->set_name(name);
  auto* tensor_type = info->mutable_type()->mutable_tensor_type();
  tensor_type->set_elem_type(elem_type);
  auto* shape = tensor_type->mutable_shape();
  for (std::int64_t d : dims) {
    if (d < 0) {
      shape->add_dim()->set_dim_param("batch");
    } else {
      shape->add_dim()->set_dim_value(d);
    }
  }
}

inline ::onnx::ModelProto empty_model(int opset = 17) {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  auto* opset_id = model.add_opset_import();
  opset_id->set_domain("");
  opset_id->set_version(opset);
  model.mutable_graph()->set_name("test");
  return model;
}

// y[2, 4] = tanh(x[2, 3] W + b)^2 with the tests' own ops: the model of test_onnx_model.cpp.
inline ::onnx::ModelProto mlp_model() {
  ::onnx::ModelProto model = empty_model();
  ::onnx::GraphProto& g = *model.mutable_graph();
  add_value_info(g.mutable_input(), "x", ::onnx::TensorProto::FLOAT, {2, 3});
  add_value_info(g.mutable_output(), "y", ::onnx::TensorProto::FLOAT, {2, 4});
  *g.add_initializer() = float_tensor("W", {3, 4}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 0.2f, -0.3f});
  *g.add_initializer() = float_tensor("b", {2, 4}, {0.05f, -0.1f, 0.15f, 0.2f, -0.25f, 0.3f, 0.35f, -0.4f}, false);
  add_node(g, "TMatMul", {"x", "W"}, {"xw"}, "/fc/MatMul");
  add_node(g, "TAdd", {"xw", "b"}, {"z"}, "/fc/Add");
  add_node(g, "TTanh", {"z"}, {"h"});  // unnamed: "TTanh_2"
  add_node(g, "TMul", {"h", "h"}, {"y"}, "/square");
  return model;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string write_model(const TempDir& dir, const ::onnx::ModelProto& model,
                               const std::string& name = "model.onnx") {
  const std::string path = dir.file(name);
  write_bytes(path, model.SerializeAsString());
  return path;
}

}  // namespace tessera::onnx::test
