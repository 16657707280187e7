// ONNX's own conformance suite: every backend node test that libonnx-testdata ships
// (data/node/test_*/model.onnx with test_data_set_*/input_*.pb and output_*.pb), loaded,
// run forward and compared with ONNX's tolerances (rtol 1e-3, atol 1e-7, as onnx's
// backend test runner).
//
//   onnx_conformance NODE_DIR COUNTS.tsv
//
// Each test is passed, failed (a wrong output, or an error that is not UnsupportedError)
// or unsupported (an op outside the registry, or an attribute, type or shape the op
// refuses by name). Prints a line per failure and closes with
// "N passed, M failed, K unsupported"; writes per-op counts to COUNTS.tsv (the table of
// docs/onnx.md). Exits 0 iff nothing failed: an op must refuse what it does not
// implement, never compute something else.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/graph.hpp"
#include "tessera/error.hpp"
#include "tessera/onnx/onnx_model.hpp"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::onnx;

namespace {

enum class Outcome { passed, failed, unsupported };

struct Result {
  Outcome outcome = Outcome::passed;
  std::string reason;
};

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;

// input_0.pb, input_1.pb, ... in numeric order.
std::vector<Value> read_numbered(const fs::path& folder, const std::string& stem) {
  std::vector<Value> values;
  for (int k = 0;; ++k) {
    const fs::path file = folder / (stem + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(file)) return values;
    values.push_back(read_tensor_file(file.string()));
  }
}

std::vector<double> elements(const Tensor& t) {
  if (t.dtype() == DType::f32) {
    const std::vector<float> v = t.to_vector<float>();
    return {v.begin(), v.end()};
  }
  if (t.dtype() == DType::f64) return t.to_vector<double>();
  const std::vector<std::int64_t> v = t.to_vector<std::int64_t>();
  return {v.begin(), v.end()};
}

// "" when `got` matches `expected`, else why not.
std::string compare(const Tensor& got, const Value& expected, const std::string& name) {
  if (got.dtype() != storage_dtype(expected.type)) {
    return "output '" + name + "' is " + got.str() + ", expected " + expected.str();
  }
  if (got.shape() != expected.shape()) {
    return "output '" + name + "' has the shape " + shape_str(got.shape()) + ", expected " + expected.str();
  }
  const std::vector<double> a = elements(got);
  const std::vector<double> b = elements(expected.tensor);
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k]) && std::isnan(b[k])) continue;
    if (a[k] == b[k]) continue;  // infinities of one sign
    if (!(std::abs(a[k] - b[k]) <= kAtol + kRtol * std::abs(b[k]))) {
      return "output '" + name + "' element " + std::to_string(k) + " is " + std::to_string(a[k]) + ", expected " +
             std::to_string(b[k]);
    }
  }
  return {};
}

std::vector<fs::path> data_sets(const fs::path& test) {
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(test)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  return sets;
}

std::vector<Tensor> tensors_of(const std::vector<Value>& values) {
  std::vector<Tensor> out;
  for (const Value& v : values) out.push_back(v.tensor);
  return out;
}

Result run_data_set(Graph graph, const fs::path& set) {
  const std::vector<Value> inputs = read_numbered(set, "input");
  const std::vector<Value> expected = read_numbered(set, "output");
  if (inputs.size() != graph.inputs.size()) {
    return {Outcome::failed, "the data set has " + std::to_string(inputs.size()) + " inputs, the graph " +
                                 std::to_string(graph.inputs.size())};
  }
  // The suite's models may leave dims symbolic; the data says what they are.
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    graph.inputs[i].shape = inputs[i].shape();
    graph.inputs[i].shape_known = true;
  }
  OnnxModel model(graph);
  const std::vector<Tensor> got = model.run(tensors_of(inputs));
  if (got.size() != expected.size()) {
    return {Outcome::failed, "gave " + std::to_string(got.size()) + " outputs, expected " +
                                 std::to_string(expected.size())};
  }
  for (std::size_t k = 0; k < got.size(); ++k) {
    const std::string why = compare(got[k], expected[k], graph.outputs[k].name);
    if (!why.empty()) return {Outcome::failed, set.filename().string() + ": " + why};
  }
  return {};
}

Result run_test(const fs::path& test) {
  try {
    ReadOptions options;
    options.defer_symbolic_inputs = true;
    const Graph graph = read_onnx_file((test / "model.onnx").string(), options);
    for (const fs::path& set : data_sets(test)) {
      Result r = run_data_set(graph, set);
      if (r.outcome != Outcome::passed) return r;
    }
    return {};
  } catch (const UnsupportedError& e) {
    return {Outcome::unsupported, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::failed, e.what()};
  }
}

// The op a test is counted under: its node's op, or "(composite)" for a test whose
// graph has several kinds of node (the *_expanded tests: a function's body).
std::string op_of(const fs::path& test) {
  try {
    ReadOptions options;
    options.defer_symbolic_inputs = true;
    const Graph graph = read_onnx_file((test / "model.onnx").string(), options);
    std::set<std::string> ops;
    for (const NodeSpec& node : graph.nodes) ops.insert(node.op_type);
    if (ops.size() == 1) return *ops.begin();
    return "(composite)";
  } catch (const std::exception&) {
    return "(refused by the reader)";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: onnx_conformance NODE_DIR COUNTS.tsv\n";
    return 2;
  }
  const fs::path root = argv[1];
  std::vector<fs::path> tests;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (fs::exists(entry.path() / "model.onnx")) tests.push_back(entry.path());
  }
  std::sort(tests.begin(), tests.end());
  std::map<std::string, std::array<int, 3>> per_op;
  int counts[3] = {0, 0, 0};
  for (const fs::path& test : tests) {
    const Result r = run_test(test);
    ++counts[static_cast<int>(r.outcome)];
    ++per_op[op_of(test)][static_cast<std::size_t>(r.outcome)];
    if (r.outcome == Outcome::failed) std::cout << "FAILED " << test.filename().string() << ": " << r.reason << "\n";
  }
  std::ofstream table(argv[2]);
  table << "op\tpassed\tfailed\tunsupported\n";
  for (const auto& entry : per_op) {
    table << entry.first << "\t" << entry.second[0] << "\t" << entry.second[1] << "\t" << entry.second[2] << "\n";
  }
  std::cout << "per-op counts written to " << argv[2] << "\n";
  std::cout << counts[0] << " passed, " << counts[1] << " failed, " << counts[2] << " unsupported\n";
  return counts[1] == 0 && !tests.empty() ? 0 : 1;
}
