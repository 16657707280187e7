// The ONNX file reader and writer (onnx_file.cpp) on files written in the test with
// ONNX's protobuf classes: the IR it builds (nodes, attributes, initializers of every
// element type and storage), a model loaded and run, the initializers written back and
// read again, and every kind of hostile file as a clear error naming what is at fault.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.hpp"
#include "onnx/graph.hpp"
#include "onnx_test_files.hpp"
#include "onnx_test_ops.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace tessera::onnx::test {
namespace {

using tessera::testing::expect_error;
using P = ::onnx::TensorProto;

TEST(OnnxFile, ReadsNodesInitializersInputsAndOpsets) {
  TempDir dir;
  const std::string path = write_model(dir, mlp_model());
  const Graph g = read_onnx_file(path);
  EXPECT_EQ(g.source, path);
  EXPECT_EQ(g.opsets.at(""), 17);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.inputs[0].shape, (Shape{2, 3}));
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].name, "/fc/MatMul");
  EXPECT_EQ(g.nodes[2].name, "TTanh_2");  // an unnamed node: "<op>_<index>"
  EXPECT_EQ(g.nodes[2].opset, 17);
  EXPECT_EQ(doubles_of(g.initializers.at("b").tensor)[2], 0.15f);  // float_data
  EXPECT_EQ(doubles_of(g.initializers.at("W").tensor)[1], -0.2f);  // raw_data
}

TEST(OnnxFile, LoadedModelRunsAndNamesItsParametersAsTheFile) {
  TempDir dir;
  const std::string path = write_model(dir, mlp_model());
  OnnxModel model(read_onnx_file(path), test_ops());
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "W");
  EXPECT_EQ(named[1].first, "b");
  const std::vector<double> x = {0.3, -0.7, 1.1, 0.5, 0.2, -0.4};
  const std::vector<double> y = doubles_of(model.forward(tensor_of(x, {2, 3}, DType::f32)));
  // Row 0, column 0 by hand: z = 0.05 + 0.3*0.1 - 0.7*0.5 + 1.1*(-0.9).
  const double z = 0.05 + 0.3 * 0.1 - 0.7 * 0.5 + 1.1 * -0.9;
  EXPECT_NEAR(y[0], std::tanh(z) * std::tanh(z), 1e-6);
}

TEST(OnnxFile, IntegerAndDoubleTensorsInEveryStorage) {
  TempDir dir;
  ::onnx::ModelProto model = mlp_model();
  auto* g = model.mutable_graph();
  auto add = [&](const std::string& name, int type) {
    P* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(3);
    return t;
  };
  P* d = add("d_typed", P::DOUBLE);
  for (double v : {1.5, -2.5, 3.0}) d->add_double_data(v);
  P* i64 = add("i64_typed", P::INT64);
  for (std::int64_t v : {7, -8, 9}) i64->add_int64_data(v);
  P* i32 = add("i32_raw", P::INT32);
  const std::int32_t raw32[3] = {-1, 2, 100000};
  i32->set_raw_data(raw32, sizeof raw32);
  P* i8 = add("i8_typed", P::INT8);
  for (int v : {-3, 4, 5}) i8->add_int32_data(v);
  P* u8 = add("u8_raw", P::UINT8);
  u8->set_raw_data(std::string("\x01\xff\x02", 3));
  P* b = add("bool_typed", P::BOOL);
  for (int v : {0, 1, 1}) b->add_int32_data(v);
  P* i16 = add("i16_raw", P::INT16);
  const std::int16_t raw16[3] = {-300, 0, 300};
  i16->set_raw_data(raw16, sizeof raw16);
  const Graph graph = read_onnx_file(write_model(dir, model));
  EXPECT_EQ(graph.initializers.at("d_typed").tensor.to_vector<double>(), (std::vector<double>{1.5, -2.5, 3.0}));
  EXPECT_EQ(graph.initializers.at("i64_typed").to_ints("t"), (std::vector<std::int64_t>{7, -8, 9}));
  EXPECT_EQ(graph.initializers.at("i32_raw").to_ints("t"), (std::vector<std::int64_t>{-1, 2, 100000}));
  EXPECT_EQ(graph.initializers.at("i8_typed").to_ints("t"), (std::vector<std::int64_t>{-3, 4, 5}));
  EXPECT_EQ(graph.initializers.at("u8_raw").to_ints("t"), (std::vector<std::int64_t>{1, 255, 2}));
  EXPECT_EQ(graph.initializers.at("bool_typed").to_ints("t"), (std::vector<std::int64_t>{0, 1, 1}));
  EXPECT_EQ(graph.initializers.at("bool_typed").type, ElementType::boolean);
  EXPECT_EQ(graph.initializers.at("i16_raw").to_ints("t"), (std::vector<std::int64_t>{-300, 0, 300}));
}

TEST(OnnxFile, AttributesOfEveryKindIncludingTensors) {
  TempDir dir;
  ::onnx::ModelProto model = mlp_model();
  auto* node = model.mutable_graph()->mutable_node(1);
  auto attr = [&](const std::string& name, ::onnx::AttributeProto::AttributeType type) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  };
  attr("alpha", ::onnx::AttributeProto::FLOAT)->set_f(0.25f);
  attr("axis", ::onnx::AttributeProto::INT)->set_i(-1);
  attr("mode", ::onnx::AttributeProto::STRING)->set_s("reflect");
  auto* ints = attr("pads", ::onnx::AttributeProto::INTS);
  ints->add_ints(1);
  ints->add_ints(2);
  *attr("value", ::onnx::AttributeProto::TENSOR)->mutable_t() = float_tensor("", {2}, {4.0f, 5.0f});
  auto* untyped = node->add_attribute();  // an old exporter's attribute without a type
  untyped->set_name("old");
  untyped->set_i(3);
  const Graph g = read_onnx_file(write_model(dir, model));
  const NodeSpec& n = g.nodes[1];
  EXPECT_DOUBLE_EQ(n.get_float("alpha", 0), 0.25);
  EXPECT_EQ(n.get_int("axis", 0), -1);
  EXPECT_EQ(n.get_string("mode", ""), "reflect");
  EXPECT_EQ(n.get_ints("pads"), (std::vector<std::int64_t>{1, 2}));
  ASSERT_NE(n.get_tensor("value"), nullptr);
  EXPECT_EQ(doubles_of(n.get_tensor("value")->tensor), (std::vector<double>{4.0, 5.0}));
  EXPECT_EQ(n.get_int("old", 0), 3);
}

TEST(OnnxFile, SymbolicDimsNeedTheCallersShape) {
  TempDir dir;
  ::onnx::ModelProto model = mlp_model();
  auto* dims = model.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  dims->mutable_dim(0)->set_dim_param("batch");
  const std::string path = write_model(dir, model);
  expect_error<UnsupportedError>([&] { read_onnx_file(path); }, {path, "input 'x'", "dim 0", "'batch'"});
  ReadOptions options;
  options.input_shapes["x"] = {2, 3};
  EXPECT_EQ(read_onnx_file(path, options).inputs[0].shape, (Shape{2, 3}));
  options.input_shapes["x"] = {2, 5};
  expect_error<InvalidArgument>([&] { read_onnx_file(path, options); }, {"input 'x'", "[2, 5]"});
  options.input_shapes["x"] = {2, 3};
  options.input_shapes["nope"] = {1};
  expect_error<InvalidArgument>([&] { read_onnx_file(path, options); }, {"'nope'", "not an input"});
}

// --- Hostile files --------------------------------------------------------------

TEST(OnnxFileHostile, TruncatedAndGarbageFilesAreClearErrors) {
  TempDir dir;
  const std::string bytes = mlp_model().SerializeAsString();
  for (std::size_t cut : {bytes.size() - 1, bytes.size() / 2, std::size_t{7}}) {
    const std::string path = dir.file("cut" + std::to_string(cut) + ".onnx");
    write_bytes(path, bytes.substr(0, cut));
    expect_error<InvalidArgument>([&] { read_onnx_file(path); }, {path});
  }
  const std::string garbage = dir.file("garbage.onnx");
  // The literal's own length (sizeof less its terminator): it holds a NUL byte.
  static const char kGarbage[] = "\xff\xff\xff\xff this is not protobuf \x00\x01";
  write_bytes(garbage, std::string(kGarbage, sizeof kGarbage - 1));
  expect_error<InvalidArgument>([&] { read_onnx_file(garbage); }, {garbage, "not a valid ONNX protobuf"});
  expect_error<Error>([&] { read_onnx_file(dir.file("missing.onnx")); }, {"missing.onnx"});
}

// Replaces initializer W of the MLP with `tensor` and expects `E` naming W and `needles`.
template <class E>
void expect_bad_initializer(const P& tensor, const std::vector<std::string>& needles) {
  TempDir dir;
  ::onnx::ModelProto model = mlp_model();
  *model.mutable_graph()->mutable_initializer(0) = tensor;
  const std::string path = write_model(dir, model);
  std::vector<std::string> all = needles;
  all.push_back("initializer 'W'");
  all.push_back(path);
  expect_error<E>([&] { read_onnx_file(path); }, all);
}

TEST(OnnxFileHostile, BadDimsAndDataThatDoNotMatchThemAreRefusedBeforeAllocating) {
  P negative = float_tensor("W", {3, 4}, std::vector<float>(12, 1.0f));
  negative.set_dims(1, -4);
  expect_bad_initializer<ShapeError>(negative, {"negative"});
  P overflow = float_tensor("W", {3, 4}, std::vector<float>(12, 1.0f));
  overflow.set_dims(0, std::numeric_limits<std::int64_t>::max() / 2);
  expect_bad_initializer<ShapeError>(overflow, {"int64"});
  P short_raw = float_tensor("W", {3, 4}, std::vector<float>(11, 1.0f));
  expect_bad_initializer<InvalidArgument>(short_raw, {"44 bytes of raw_data", "48"});
  P huge = float_tensor("W", {3, 4}, std::vector<float>(12, 1.0f));
  huge.set_dims(0, 1'000'000'000);  // far larger than the file: refused, not allocated
  expect_bad_initializer<InvalidArgument>(huge, {"raw_data", "16000000000"});
  P short_typed = float_tensor("W", {3, 4}, std::vector<float>(5, 1.0f), false);
  expect_bad_initializer<InvalidArgument>(short_typed, {"5 elements in float_data", "12"});
  P half = float_tensor("W", {3, 4}, {});
  half.set_data_type(P::FLOAT16);
  expect_bad_initializer<UnsupportedError>(half, {"float16"});
  P invalid = float_tensor("W", {3, 4}, {});
  invalid.set_data_type(77);
  expect_bad_initializer<InvalidArgument>(invalid, {"invalid element type (77)"});
}

TEST(OnnxFileHostile, MissingValuesDuplicatesAndCyclesNameTheNode) {
  TempDir dir;
  ::onnx::ModelProto missing = mlp_model();
  missing.mutable_graph()->mutable_initializer()->RemoveLast();  // b
  const std::string p1 = write_model(dir, missing, "missing.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p1); }, {p1, "node '/fc/Add'", "'b'", "no node"});

  ::onnx::ModelProto twice = mlp_model();
  add_node(*twice.mutable_graph(), "TTanh", {"x"}, {"z"}, "/again");
  const std::string p2 = write_model(dir, twice, "twice.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p2); }, {"'z'", "produced twice", "node '/again'"});

  ::onnx::ModelProto cycle = mlp_model();
  cycle.mutable_graph()->mutable_node(0)->set_input(0, "h");  // MatMul reads Tanh's output
  const std::string p3 = write_model(dir, cycle, "cycle.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p3); }, {p3, "cycle", "node '"});
}

TEST(OnnxFileHostile, OtherDomainsSubgraphsAndMissingOpsetsAreRefused) {
  TempDir dir;
  ::onnx::ModelProto domain = mlp_model();
  domain.mutable_graph()->mutable_node(1)->set_domain("com.microsoft");
  const std::string p1 = write_model(dir, domain, "domain.onnx");
  expect_error<UnsupportedError>([&] { read_onnx_file(p1); }, {"node '/fc/Add'", "'com.microsoft'"});

  ::onnx::ModelProto subgraph = mlp_model();
  auto* a = subgraph.mutable_graph()->mutable_node(1)->add_attribute();
  a->set_name("then_branch");
  a->set_type(::onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("branch");
  const std::string p2 = write_model(dir, subgraph, "subgraph.onnx");
  expect_error<UnsupportedError>([&] { read_onnx_file(p2); }, {"node '/fc/Add'", "'then_branch'", "subgraph"});

  ::onnx::ModelProto no_opset = mlp_model();
  no_opset.mutable_opset_import(0)->set_domain("ai.onnx.ml");
  const std::string p3 = write_model(dir, no_opset, "no_opset.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p3); }, {p3, "no opset"});
}

// W stored in `location`, the first 48 bytes of the file at `offset`.
::onnx::ModelProto with_external_w(const std::string& location, std::int64_t offset = 0,
                                   const std::string& length = "48") {
  ::onnx::ModelProto model = mlp_model();
  P* w = model.mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(P::EXTERNAL);
  auto entry = [&](const std::string& key, const std::string& value) {
    auto* e = w->add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  entry("offset", std::to_string(offset));
  if (!length.empty()) entry("length", length);
  return model;
}

void write_weights(const std::string& path, std::int64_t offset) {
  std::string bytes(static_cast<std::size_t>(offset), '\0');
  std::vector<float> w(12);
  for (int k = 0; k < 12; ++k) w[k] = 0.5f * static_cast<float>(k);
  bytes.append(reinterpret_cast<const char*>(w.data()), sizeof(float) * 12);
  write_bytes(path, bytes);
}

TEST(OnnxFileExternal, RelativePathsInsideTheFolderAreRead) {
  TempDir dir;
  fs::create_directories(dir.path() / "weights");
  write_weights(dir.file("weights/w.bin"), 16);
  const Graph g = read_onnx_file(write_model(dir, with_external_w("weights/w.bin", 16)));
  const std::vector<double> w = doubles_of(g.initializers.at("W").tensor);
  EXPECT_EQ(w[0], 0.0);
  EXPECT_EQ(w[11], 5.5);
}

TEST(OnnxFileExternal, PathsLeavingTheFolderAndShortFilesAreRefused) {
  TempDir dir;
  write_weights(dir.file("w.bin"), 0);
  fs::create_directories(dir.path() / "inner");
  const std::string outside = (dir.path() / "w.bin").string();
  const std::string p1 = write_model(dir, with_external_w(outside), "inner/absolute.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p1); }, {"initializer 'W'", outside, "absolute"});
  const std::string p2 = write_model(dir, with_external_w("../w.bin"), "inner/escape.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p2); }, {"initializer 'W'", "'../w.bin'", "leaves"});
  fs::create_symlink(outside, dir.path() / "inner" / "link.bin");
  const std::string p3 = write_model(dir, with_external_w("link.bin"), "inner/link.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p3); }, {"initializer 'W'", "'link.bin'", "outside"});
  const std::string p4 = write_model(dir, with_external_w("w.bin", 8), "short.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p4); }, {"initializer 'W'", "bytes 8 to 56", "has 48"});
  const std::string p5 = write_model(dir, with_external_w("w.bin", 0, "40"), "length.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p5); }, {"initializer 'W'", "length 40"});
  const std::string p7 = write_model(dir, with_external_w(std::string("w.bin\0/../../x", 14)), "nul.onnx");
  expect_error<InvalidArgument>([&] { read_onnx_file(p7); }, {"initializer 'W'", "NUL"});
  const std::string p6 = write_model(dir, with_external_w("nothing.bin"), "nothing.onnx");
  expect_error<Error>([&] { read_onnx_file(p6); }, {"nothing.bin"});
}

// --- Writing initializers back ----------------------------------------------------

TEST(OnnxFileSave, TrainedParametersGoBackIntoTheFileAndReadAgain) {
  TempDir dir;
  fs::create_directories(dir.path() / "in");
  write_weights(dir.file("in/w.bin"), 0);
  ::onnx::ModelProto model = with_external_w("w.bin");
  *model.mutable_graph()->add_initializer() = float_tensor("unused_const", {2}, {7.0f, 8.0f});
  const std::string in = write_model(dir, model, "in/model.onnx");
  OnnxModel loaded(read_onnx_file(in), test_ops());
  Parameter& b = *loaded.named_parameters()[1].second;
  b.value.copy_from(tensor_of({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, DType::f32));
  const std::string out = dir.file("tuned.onnx");  // another folder: W's external data is copied in
  save_onnx(loaded, in, out);
  const Graph again = read_onnx_file(out);
  EXPECT_EQ(doubles_of(again.initializers.at("b").tensor), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(doubles_of(again.initializers.at("W").tensor)[11], 5.5);
  EXPECT_EQ(doubles_of(again.initializers.at("unused_const").tensor), (std::vector<double>{7, 8}));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  // The same graph otherwise: it still runs, with the new bias.
  OnnxModel reloaded(again, test_ops());
  EXPECT_EQ(doubles_of(reloaded.named_parameters()[1].second->value), doubles_of(b.value));
  // Over the file it reads: the new values replace the old ones in place.
  b.value.copy_from(tensor_of({8, 7, 6, 5, 4, 3, 2, 1}, {2, 4}, DType::f32));
  save_onnx(loaded, out, out);
  EXPECT_EQ(doubles_of(read_onnx_file(out).initializers.at("b").tensor), (std::vector<double>{8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST(OnnxFileSave, ValuesThatDoNotFitTheFileAreRefused) {
  TempDir dir;
  const std::string in = write_model(dir, mlp_model());
  const std::string out = dir.file("out.onnx");
  expect_error<InvalidArgument>(
      [&] { save_onnx_with_initializers(in, out, {{"b", Tensor::zeros({2, 4}, DType::f64)}}); },
      {"initializer 'b'", "float", "f64"});
  expect_error<InvalidArgument>(
      [&] { save_onnx_with_initializers(in, out, {{"b", Tensor::zeros({4, 2}, DType::f32)}}); },
      {"initializer 'b'", "[2, 4]", "[4, 2]"});
  expect_error<InvalidArgument>(
      [&] { save_onnx_with_initializers(in, out, {{"nope", Tensor::zeros({1}, DType::f32)}}); }, {"'nope'"});
  EXPECT_FALSE(fs::exists(out));
}

TEST(OnnxFile, TensorFilesOfTheConformanceSuite) {
  TempDir dir;
  const std::string path = dir.file("input_0.pb");
  write_bytes(path, float_tensor("x", {2}, {1.5f, -2.0f}).SerializeAsString());
  const Value v = read_tensor_file(path);
  EXPECT_EQ(v.type, ElementType::f32);
  EXPECT_EQ(doubles_of(v.tensor), (std::vector<double>{1.5, -2.0}));
  write_bytes(path, "\x0a\xff");
  expect_error<InvalidArgument>([&] { read_tensor_file(path); }, {path});
}

}  // namespace
}  // namespace tessera::onnx::test
