// model.type onnx: its `model` keys and the rules between them and the rest of the
// config. The graph itself is read later, by tessera-run, against the data's grid; what
// can be refused from the config alone is refused here, before MPI_Init, on every rank.
#include <string>

#include "config_parser.hpp"
#include "onnx/graph.hpp"
#include "tessera/error.hpp"

namespace tessera::train::detail {

void parse_onnx_model(const Parser& p, const YAML::Node& v, const std::string& key, RunConfig& c) {
  auto& m = c.onnx;
  p.section(v, key, {
    {"type", [&](const YAML::Node& x, const std::string& kk) {
       p.choice(x, kk, kModelTypes);
       // Said here, at the key's line: without the reader, nothing of the rest can run.
       if (!onnx::onnx_file_support()) {
         throw ConfigError(p.where(x, kk) +
                           ": onnx needs ONNX support, which this tessera was built without (install libonnx-dev "
                           "and libprotobuf-dev and reconfigure)");
       }
     }},
    {"path", [&](const YAML::Node& x, const std::string& kk) { m.path = p.string(x, kk); }},
    {"export", [&](const YAML::Node& x, const std::string& kk) { m.export_path = x.IsNull() ? "" : p.string(x, kk); }},
  });
}

void check_onnx(const RunConfig& c) {
  const std::string where = c.source + ": ";
  if (c.onnx.path.empty()) throw ConfigError(where + "model.path is required with model.type onnx (the ONNX file)");
  if (!c.onnx.export_path.empty() && c.onnx.export_path == c.onnx.path) {
    // The next run (or a resume) reads model.path as the graph it trains from.
    throw ConfigError(where + "model.export names model.path ('" + c.onnx.path +
                      "'); write the trained graph to another file");
  }
  // Tensor parallelism of an imported graph is not built; fsdp2 wraps child modules and
  // an OnnxModel owns its parameters itself (docs/onnx.md, "Limits").
  if (c.parallelism.tensor > 1) {
    throw ConfigError(where + "parallelism.tensor (" + std::to_string(c.parallelism.tensor) +
                      ") must be 1 with model.type onnx (an imported graph runs data- and domain-parallel only)");
  }
  if (c.parallelism.data == DataParallelMode::fsdp2) {
    throw ConfigError(where + "parallelism.data: fsdp2 is not supported with model.type onnx (use ddp or none)");
  }
  if (c.device == "cuda") {
    throw ConfigError(where + "device: cuda is not supported with model.type onnx (imported graphs run on the host "
                              "backend); use device: host or auto");
  }
  // The graph runs in its file's numerics; bf16-mixed would be a silent no-op.
  if (c.precision != Precision::fp32) {
    throw ConfigError(where + "precision: " + std::string(precision_name(c.precision)) +
                      " is not supported with model.type onnx (the graph runs in its file's float32)");
  }
}

}  // namespace tessera::train::detail
