#include "tessera/models/field_emulator.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "backend/compute.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/detail/checked_math.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/channel_mlp.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::models {

// ---------------------------------------------------------------------------
// Config <-> YAML
// ---------------------------------------------------------------------------

constexpr tessera::detail::EnumName<domain::LatitudeGrid> kLatitudeGridNames[] = {
    {domain::LatitudeGrid::with_poles, "with_poles"},
    {domain::LatitudeGrid::cell_centres, "cell_centres"},
    {domain::LatitudeGrid::explicit_rows, "explicit_rows"},
    {domain::LatitudeGrid::unweighted, "unweighted"},
};

std::string_view latitude_grid_name(domain::LatitudeGrid grid) noexcept {
  return tessera::detail::name_of(kLatitudeGridNames, grid);
}

domain::LatitudeGrid parse_latitude_grid(std::string_view text, std::string_view key) {
  return tessera::detail::parse_enum(kLatitudeGridNames, text, key, "latitude grid");
}

domain::LatitudeSpec FieldEmulatorConfig::latitude_spec() const {
  domain::LatitudeSpec spec(latitude_grid);
  spec.degrees = latitudes;
  return spec;
}

domain::PolePolicy parse_pole_policy(std::string_view text, std::string_view key) {
  for (auto p : {domain::PolePolicy::zero, domain::PolePolicy::replicate, domain::PolePolicy::across_pole,
                 domain::PolePolicy::across_pole_point}) {
    if (text == domain::pole_policy_name(p)) return p;
  }
  throw ConfigError(std::string(key) + ": unknown pole policy '" + std::string(text) +
                    "' (expected zero, replicate, across_pole or across_pole_point)");
}

void FieldEmulatorConfig::validate() const {
  auto positive = [](const char* key, std::int64_t v) {
    if (v < 1) throw ConfigError(std::string("model.") + key + " must be >= 1, got " + std::to_string(v));
  };
  positive("channels", channels);
  positive("width", width);
  positive("mlp_hidden", mlp_hidden);
  if (n_blocks < 0) throw ConfigError("model.blocks must be >= 0, got " + std::to_string(n_blocks));
  if (kernel < 1) throw ConfigError("model.kernel must be >= 1, got " + std::to_string(kernel));
  if (nlat < 1 || nlon < 1) {
    throw ConfigError("model grid must be at least 1 x 1, got " + std::to_string(nlat) + " x " + std::to_string(nlon));
  }
  try {
    latitude_spec().validate(nlat);
  } catch (const InvalidArgument& e) {
    throw ConfigError(std::string("model.latitude_grid ") + std::string(latitude_grid_name(latitude_grid)) +
                      " with model.latitudes: " + e.what());
  }
  auto sized = [&](const char* key, std::size_t n) {
    if (n != 0 && n != static_cast<std::size_t>(channels)) {
      throw ConfigError(std::string("model.") + key + " has " + std::to_string(n) + " entries but the model has " +
                        std::to_string(channels) + " channels");
    }
  };
  sized("variables", variables.size());
  sized("mean", mean.size());
  sized("std", std.size());
  for (std::size_t c = 0; c < std.size(); ++c) {
    if (!(std[c] > 0) || !std::isfinite(std[c])) {
      throw ConfigError("model.std[" + std::to_string(c) + "] must be a positive finite number");
    }
  }
}

std::int64_t FieldEmulatorConfig::parameter_count() const {
  using tessera::detail::checked_add;
  using tessera::detail::checked_mul;
  const char* who = "model size";
  try {
    const std::int64_t kk = checked_mul(kernel, kernel, who);
    // Encoder and decoder convolutions: weight + bias each.
    const std::int64_t encoder = checked_add(checked_mul(checked_mul(channels, width, who), kk, who), width, who);
    const std::int64_t decoder = checked_add(checked_mul(checked_mul(width, channels, who), kk, who), channels, who);
    // A block: 1x1 conv width -> hidden and hidden -> width, with biases.
    const std::int64_t block = checked_add(checked_mul(checked_mul(2, width, who), mlp_hidden, who), checked_add(mlp_hidden, width, who), who);
    return checked_add(checked_add(encoder, decoder, who), checked_mul(n_blocks, block, who), who);
  } catch (const ShapeError& e) {
    throw ConfigError(std::string("the model's parameter count does not fit in int64 (") + e.what() + ")");
  }
}

namespace {

// Doubles written with 17 significant digits so that the round trip is exact.
std::string exact(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

template <class T, class F>
std::string flow_list(const std::vector<T>& values, F&& to_text) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + to_text(values[i]);
  return s + "]";
}

std::string where(std::string_view source, const YAML::Node& node, const std::string& key) {
  std::string s(source);
  if (node.Mark().line >= 0) s += ":" + std::to_string(node.Mark().line + 1);
  return s + ": model." + key;
}

template <class T>
T scalar_as(const YAML::Node& node, std::string_view source, const std::string& key, const char* expected) {
  if (!node.IsScalar()) throw ConfigError(where(source, node, key) + " must be " + expected);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw ConfigError(where(source, node, key) + " must be " + expected + ", got '" + node.Scalar() + "'");
  }
}

template <class T>
std::vector<T> list_as(const YAML::Node& node, std::string_view source, const std::string& key, const char* expected) {
  if (!node.IsSequence()) throw ConfigError(where(source, node, key) + " must be a list of " + expected);
  std::vector<T> out;
  for (std::size_t i = 0; i < node.size(); ++i) {
    out.push_back(scalar_as<T>(node[i], source, key + "[" + std::to_string(i) + "]", expected));
  }
  return out;
}

}  // namespace

std::string FieldEmulatorConfig::to_yaml() const {
  std::ostringstream out;
  out << "type: field_emulator\n"
      << "channels: " << channels << "\n"
      << "width: " << width << "\n"
      << "mlp_hidden: " << mlp_hidden << "\n"
      << "blocks: " << n_blocks << "\n"
      << "kernel: " << kernel << "\n"
      << "residual: " << (residual ? "true" : "false") << "\n"
      << "pole: " << domain::pole_policy_name(pole) << "\n"
      << "nlat: " << nlat << "\n"
      << "nlon: " << nlon << "\n"
      << "latitude_grid: " << latitude_grid_name(latitude_grid) << "\n"
      << (latitudes.empty() ? std::string() : "latitudes: " + flow_list(latitudes, exact) + "\n")
      << "variables: " << flow_list(variables, [](const std::string& v) { return "\"" + v + "\""; }) << "\n"
      << "mean: " << flow_list(mean, exact) << "\n"
      << "std: " << flow_list(std, exact) << "\n"
      << "dt_seconds: " << exact(dt_seconds) << "\n";
  return out.str();
}

FieldEmulatorConfig FieldEmulatorConfig::from_yaml(std::string_view yaml, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string(source) + ": invalid YAML: " + e.what());
  }
  if (!root.IsMap()) throw ConfigError(std::string(source) + ": the model description must be a mapping");
  FieldEmulatorConfig c;
  for (const auto& item : root) {
    const std::string key = item.first.Scalar();
    const YAML::Node& v = item.second;
    if (key == "type") {
      const auto type = scalar_as<std::string>(v, source, key, "a model type");
      if (type != "field_emulator") {
        throw ConfigError(where(source, v, key) + " is '" + type + "', expected field_emulator");
      }
    } else if (key == "channels") {
      c.channels = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "width") {
      c.width = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "mlp_hidden") {
      c.mlp_hidden = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "blocks") {
      c.n_blocks = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "kernel") {
      c.kernel = scalar_as<int>(v, source, key, "an integer");
    } else if (key == "residual") {
      c.residual = scalar_as<bool>(v, source, key, "true or false");
    } else if (key == "pole") {
      c.pole = parse_pole_policy(scalar_as<std::string>(v, source, key, "a pole policy"), where(source, v, key));
    } else if (key == "nlat") {
      c.nlat = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "nlon") {
      c.nlon = scalar_as<std::int64_t>(v, source, key, "an integer");
    } else if (key == "latitude_grid") {
      c.latitude_grid =
          parse_latitude_grid(scalar_as<std::string>(v, source, key, "a latitude grid"), where(source, v, key));
    } else if (key == "latitudes") {
      c.latitudes = list_as<double>(v, source, key, "numbers");
    } else if (key == "variables") {
      c.variables = list_as<std::string>(v, source, key, "names");
    } else if (key == "mean") {
      c.mean = list_as<double>(v, source, key, "numbers");
    } else if (key == "std") {
      c.std = list_as<double>(v, source, key, "numbers");
    } else if (key == "dt_seconds") {
      c.dt_seconds = scalar_as<double>(v, source, key, "a number");
    } else {
      throw ConfigError(where(source, item.first, key) + ": unknown key '" + key +
                        "' (expected type, channels, width, mlp_hidden, blocks, kernel, residual, pole, nlat, "
                        "nlon, latitude_grid, latitudes, variables, mean, std, dt_seconds)");
    }
  }
  c.validate();
  return c;
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

FieldEmulator::FieldEmulator(const FieldEmulatorConfig& config, const Mesh& mesh) : config_(config) {
  config_.validate();
  if (config_.mlp_hidden % mesh.tp_size() != 0) {
    throw ConfigError("model.mlp_hidden (" + std::to_string(config_.mlp_hidden) +
                      ") must be divisible by parallelism.tensor (" + std::to_string(mesh.tp_size()) +
                      "): the blocks split their hidden channels over tp");
  }
  decomposition_ = std::make_unique<domain::Decomposition>(
      mesh, Shape{1, config_.channels, config_.nlat, config_.nlon});
  domain::DomainConv2dOptions conv;
  conv.pole = config_.pole;
  conv.lon_padding = domain::LonPadding::periodic;
  conv.device = mesh.device();  // the model lives on the mesh's device
  register_child("encoder", std::make_unique<domain::DomainConv2d>(*decomposition_, config_.channels, config_.width,
                                                                   config_.kernel, config_.kernel, conv));
  auto blocks = std::make_unique<nn::Sequential>();
  for (std::int64_t i = 0; i < config_.n_blocks; ++i) {
    blocks->append(std::make_unique<ChannelMlpBlock>(config_.width, config_.mlp_hidden, DType::f32, mesh.device()));
  }
  register_child("blocks", std::move(blocks));
  register_child("act", std::make_unique<nn::GELU>());
  register_child("decoder", std::make_unique<domain::DomainConv2d>(*decomposition_, config_.width, config_.channels,
                                                                   config_.kernel, config_.kernel, conv));
  // The blocks opt in (ChannelMlpBlock::tensor_parallel_paths); with tp = 1 nothing changes.
  if (mesh.tp_size() > 1) tp::apply_tensor_parallel(*this, mesh.tp());
}

FieldEmulator::~FieldEmulator() {
  // The convolutions' halo plans refer to decomposition_, which as a member of this
  // class would otherwise be destroyed before the base class destroys the children.
  mutable_children().clear();
}

std::string FieldEmulator::describe() const {
  return "FieldEmulator(channels=" + std::to_string(config_.channels) + ", width=" + std::to_string(config_.width) +
         ", mlp_hidden=" + std::to_string(config_.mlp_hidden) + ", blocks=" + std::to_string(config_.n_blocks) +
         ", kernel=" + std::to_string(config_.kernel) + ", residual=" + (config_.residual ? "true" : "false") +
         ", grid " + std::to_string(config_.nlat) + "x" + std::to_string(config_.nlon) + ")";
}

Tensor FieldEmulator::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  Tensor h = at("encoder").forward(input);
  h = at("blocks").forward(h);
  h = at("act").forward(h);
  Tensor y = at("decoder").forward(h);
  if (config_.residual) {
    // decoder's output is a fresh tensor, so adding in place aliases nothing cached.
    ops::axpy(1.0, input.contiguous(), y);
  }
  return y;
}

Tensor FieldEmulator::backward(const Tensor& grad_output) {
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor g = at("decoder").backward(grad_output);
  g = at("act").backward(g);
  g = at("blocks").backward(g);
  g = at("encoder").backward(g);
  if (config_.residual) ops::axpy(1.0, grad_output.contiguous(), g);
  return g;
}

std::vector<std::string> checkpoint_activations(FieldEmulator& model, const nn::CheckpointPolicy& policy) {
  return nn::checkpoint_blocks(model, "blocks", policy);
}

namespace {

// field [B, channels, ...] f32: x = x * scale[c] + shift[c] per channel, on the field's
// device.
void affine_per_channel(Tensor& field, const std::vector<double>& scale, const std::vector<double>& shift,
                        const std::string& what) {
  if (!field.defined() || field.dim() < 2 || static_cast<std::size_t>(field.size(1)) != scale.size() ||
      field.dtype() != DType::f32 || !field.is_contiguous()) {
    throw ShapeError(what + ": field " + (field.defined() ? field.str() : std::string("undefined")) +
                     " must be a contiguous f32 [B, " + std::to_string(scale.size()) + ", ...]");
  }
  const std::int64_t batch = field.size(0), channels = field.size(1);
  const std::int64_t inner = batch > 0 && channels > 0 ? field.numel() / (batch * channels) : 0;
  std::vector<double> coefficients(scale);
  coefficients.insert(coefficients.end(), shift.begin(), shift.end());
  const Tensor on_device =
      Tensor::from_vector<double>(coefficients, {static_cast<std::int64_t>(coefficients.size())}).to(field.device());
  const double* c = on_device.data<double>();
  tessera::detail::compute_for(field, what + ": field")
      .channel_affine(field.dtype(), field.data(), c, c + channels, batch, channels, inner, field.device().index);
}

}  // namespace

void FieldEmulator::normalize(Tensor& field) const {
  const auto n = static_cast<std::size_t>(config_.channels);
  std::vector<double> scale(n, 1.0), shift(n, 0.0);
  for (std::size_t c = 0; c < n; ++c) {
    const double m = config_.mean.empty() ? 0.0 : config_.mean[c];
    const double s = config_.std.empty() ? 1.0 : config_.std[c];
    scale[c] = 1.0 / s;
    shift[c] = -m / s;
  }
  affine_per_channel(field, scale, shift, describe() + " normalize");
}

void FieldEmulator::denormalize(Tensor& field) const {
  const auto n = static_cast<std::size_t>(config_.channels);
  std::vector<double> scale(n, 1.0), shift(n, 0.0);
  for (std::size_t c = 0; c < n; ++c) {
    scale[c] = config_.std.empty() ? 1.0 : config_.std[c];
    shift[c] = config_.mean.empty() ? 0.0 : config_.mean[c];
  }
  affine_per_channel(field, scale, shift, describe() + " denormalize");
}

Tensor FieldEmulator::predict(const Tensor& physical_input) {
  Tensor x = physical_input.contiguous().clone();
  normalize(x);
  Tensor y = forward(x);
  y = y.contiguous();
  denormalize(y);
  return y;
}

}  // namespace tessera::models
