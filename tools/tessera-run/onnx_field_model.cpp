#include "onnx_field_model.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::run {
namespace {

// "[?, 3, 32, 64]": a symbolic dim as "?".
std::string declared_text(const Shape& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + (shape[d] < 0 ? "?" : std::to_string(shape[d]));
  return s + "]";
}

// load_onnx's errors (a missing or malformed file, an op it does not run) as the key's.
std::unique_ptr<onnx::OnnxModel> read_graph(const std::string& path, const onnx::LoadOptions& options) {
  try {
    return onnx::load_onnx(path, options);
  } catch (const Error& e) {
    throw ConfigError(std::string("model.path: ") + e.what());
  }
}

// The graph's one input and one output, float32, the input (batch, channels, lat, lon)
// on the data's channels and grid: the shape to load it with (its symbolic dims filled
// from the data and `batch`).
Shape graph_input_shape(onnx::OnnxModel& probe, const std::string& path, const FieldDataInfo& info,
                        std::int64_t batch, bool training) {
  const std::string where = "model.path: '" + path + "'";
  if (probe.input_names().size() != 1 || probe.output_names().size() != 1) {
    throw ConfigError(where + " has " + std::to_string(probe.input_names().size()) + " inputs and " +
                      std::to_string(probe.output_names().size()) +
                      " outputs; tessera-run trains a graph of one input (the fields at time t) and one output "
                      "(the next state)");
  }
  const std::string input = probe.input_names().front();
  if (probe.input_dtypes().front() != DType::f32 || probe.output_dtypes().front() != DType::f32) {
    throw ConfigError(where + ": input '" + input + "' and output '" + probe.output_names().front() +
                      "' must be float32 (the fields are); export the model in float32");
  }
  const Shape declared = probe.input_shapes().front();
  const Shape data{batch, info.channels, info.nlat, info.nlon};
  bool fits = declared.size() == 4;
  for (std::size_t d = 1; fits && d < 4; ++d) fits = declared[d] < 0 || declared[d] == data[d];
  if (!fits) {
    std::string variables;
    for (const auto& v : info.variables) variables += (variables.empty() ? "" : ",") + v;
    throw ConfigError(where + ": input '" + input + "' is " + declared_text(declared) +
                      ", not (batch, channels, lat, lon) = [batch, " + std::to_string(info.channels) + ", " +
                      std::to_string(info.nlat) + ", " + std::to_string(info.nlon) + "]: the data has " +
                      std::to_string(info.channels) + " channels (" + variables + ") on " +
                      std::to_string(info.nlat) + "x" + std::to_string(info.nlon));
  }
  Shape shape = data;
  if (declared[0] >= 0 && declared[0] != batch) {
    if (training) {
      throw ConfigError("data.batch_size: '" + path + "' has a fixed batch of " + std::to_string(declared[0]) +
                        " (input '" + input + "' is " + declared_text(declared) + "), but each data-parallel "
                        "replica trains on " + std::to_string(batch) + " samples; set data.batch_size to " +
                        std::to_string(declared[0]) + " x the replicas, or export with a dynamic batch "
                        "(dynamic_axes={'" + input + "': {0: 'batch'}})");
    }
    shape[0] = declared[0];  // forward-only: batches are padded to it
  }
  return shape;
}

// The split graph's refusal already went through the executor's agreement, which named
// the failing rank; the agreement around it here would name it a second time.
std::string without_rank_suffix(std::string message) {
  const auto at = message.rfind(" (on rank ");
  if (at != std::string::npos && message.back() == ')') message.erase(at);
  return message;
}

std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string list_text(const std::vector<double>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + number_text(values[i]);
  return s + "]";
}

}  // namespace

OnnxFieldModel::OnnxFieldModel(const RunConfig& cfg, const FieldDataInfo& info, const Mesh& mesh, std::int64_t batch,
                               bool training)
    : path_(cfg.onnx.path), mesh_(mesh) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    // First as the file declares it (symbolic dims unresolved), to check it against the
    // data; loaded again only when a symbolic dim needs its size.
    onnx::LoadOptions look;
    look.defer_symbolic_inputs = true;
    graph_ = read_graph(path_, look);
    const Shape shape = graph_input_shape(*graph_, path_, info, batch, training);
    if (graph_->input_shapes().front() != shape) {
      onnx::LoadOptions sized;
      sized.input_shapes[graph_->input_names().front()] = shape;
      graph_ = read_graph(path_, sized);
    }
    batch_ = shape[0];
  });
  // The field emulator's decomposition: latitude bands over the domain group.
  decomposition_ = std::make_unique<domain::Decomposition>(mesh, Shape{1, info.channels, info.nlat, info.nlon});
  split_ = mesh.domain_size() > 1;
  if (split_) graph_->split_over(*decomposition_);
}

std::string OnnxFieldModel::describe() const {
  std::int64_t elements = 0;
  for (const auto& [name, p] : graph_->named_parameters()) elements += p->value.numel();
  return "OnnxModel(" + path_ + ": " + graph_->input_names().front() + " " + shape_str(graph_->input_shapes().front()) +
         " -> " + graph_->output_names().front() + ", " + std::to_string(elements) + " parameters in " +
         std::to_string(graph_->named_parameters().size()) + " tensors" + (split_ ? ", split over latitude bands" : "") +
         ")";
}

Tensor OnnxFieldModel::run_checked(const Tensor& x) {
  if (checked_) return graph_->forward(x);
  // The first forward places a split graph's nodes and shows the output's shape: both
  // are refusals of the config, the same on every rank.
  Tensor y;
  agree_on_success(mesh_.world().mpi_comm(), [&] {
    try {
      y = graph_->forward(x);
    } catch (const UnsupportedError& e) {
      if (!split_) throw;
      throw ConfigError("parallelism.domain: " + without_rank_suffix(e.what()) +
                        " (parallelism.domain: 1 trains this graph data-parallel)");
    }
    const std::string output = graph_->output_names().front();
    if (y.shape() != x.shape()) {
      throw ConfigError("model.path: output '" + output + "' of '" + path_ + "' is " + shape_str(y.shape()) +
                        " for input " + shape_str(x.shape()) +
                        " on this rank; tessera-run trains a graph whose output is the next state of its input "
                        "(batch, channels, lat, lon)");
    }
    if (split_ && !graph_->output_split(0).split) {
      throw ConfigError("parallelism.domain: output '" + output + "' of '" + path_ +
                        "' is not split like its input; parallelism.domain: 1 trains this graph data-parallel");
    }
  });
  checked_ = true;
  return y;
}

Tensor OnnxFieldModel::forward(const Tensor& x) {
  const std::int64_t n = x.shape()[0];
  if (n == batch_) return run_checked(x);
  Shape chunk_shape = x.shape();
  chunk_shape[0] = batch_;
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  for (std::int64_t start = 0; start < n; start += batch_) {
    const std::int64_t count = std::min(batch_, n - start);
    Tensor chunk = Tensor::zeros(chunk_shape, DType::f32);
    chunk.narrow(0, 0, count).copy_from(x.narrow(0, start, count));
    const Tensor y = run_checked(chunk);
    out.narrow(0, start, count).copy_from(y.narrow(0, 0, count));
  }
  return out;
}

double OnnxFieldModel::forward_backward(const Tensor& x, const Tensor& target, const domain::LatitudeSpec& spec) {
  const Tensor prediction = run_checked(x);
  const domain::LossResult loss = domain::lat_weighted_mse(prediction, target, *decomposition_, spec);
  graph_->backward(loss.grad);
  return loss.value;
}

std::string onnx_model_yaml(OnnxFieldModel& model, const FieldDataInfo& info, const RunConfig& cfg) {
  onnx::OnnxModel& g = model.graph();
  std::ostringstream y;
  y << "model:\n  type: onnx\n";
  y << "  input: \"" << g.input_names().front() << "\"\n";
  y << "  output: \"" << g.output_names().front() << "\"\n";
  // Names and shapes: a checkpoint of another graph is refused before any weight is read.
  y << "  parameters:\n";
  for (const auto& [name, p] : g.named_parameters()) y << "    \"" << name << "\": " << shape_str(p->value.shape()) << "\n";
  y << "  channels: " << info.channels << "\n  nlat: " << info.nlat << "\n  nlon: " << info.nlon << "\n";
  y << "  latitude_grid: " << models::latitude_grid_name(info.latitude_grid) << "\n";
  if (info.latitude_grid == domain::LatitudeGrid::explicit_rows) {
    y << "  latitudes: " << list_text(info.latitude_spec().degrees) << "\n";
  }
  y << "  variables: [";
  for (std::size_t i = 0; i < info.variables.size(); ++i) y << (i ? ", " : "") << "\"" << info.variables[i] << "\"";
  y << "]\n";
  if (!info.mean.empty()) y << "  mean: " << list_text(info.mean) << "\n  std: " << list_text(info.std) << "\n";
  y << "  dt_seconds: " << number_text(info.dt_seconds * static_cast<double>(cfg.data.lead)) << "\n";
  return y.str();
}

std::string model_section(const std::string& metadata) {
  std::istringstream in(metadata);
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      inside = line == "model:";
      continue;
    }
    if (line.rfind("  ", 0) != 0) break;
    block += line + "\n";
  }
  return block;
}

}  // namespace tessera::run
