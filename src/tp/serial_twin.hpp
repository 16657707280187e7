#pragma once
// Private: what every tensor-parallel layer does the same way with its serial twin —
// naming itself in errors, taking over a serial layer's options, and handing its
// reassembled masters back to a fresh serial layer.

#include <memory>
#include <optional>
#include <string>

#include "tessera/parameter.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/sharding.hpp"

namespace tessera::tp::detail {

// "ColumnParallelLinear 'layers.0.mlp.up'" (or just the type when unnamed).
inline std::string layer_label(const std::string& type, const std::string& name) {
  return name.empty() ? type : type + " '" + name + "'";
}

// The options that rebuild `serial` (an nn::Linear or nn::Conv2d) as a parallel layer:
// same bias, dtype, device and init specs.
template <class Serial>
ParallelLinearOptions options_like(const Serial& serial, const std::string& name,
                                   std::optional<int> sequence_dim = std::nullopt) {
  ParallelLinearOptions o;
  o.sequence_dim = sequence_dim;
  o.bias = serial.has_bias();
  o.dtype = serial.weight.value.dtype();
  o.device = serial.weight.value.device();
  o.name = name;
  o.weight_init = serial.weight.init;
  if (serial.has_bias()) o.bias_init = serial.bias.init;
  return o;
}

// `layer`, freshly built in `serial`'s shape, with this rank's block of `serial`'s weight
// (and bias, where the layer has one): every from_serial.
template <class Layer, class Serial>
std::unique_ptr<Layer> with_serial_weights(std::unique_ptr<Layer> layer, const Serial& serial,
                                           const std::string& name) {
  const std::string label = layer_label(layer->type_name(), name);
  load_shard_from_master(layer->weight, serial.weight.value, label + " weight");
  if constexpr (requires { layer->has_bias(); }) {
    if (layer->has_bias()) load_shard_from_master(layer->bias, serial.bias.value, label + " bias");
  }
  return layer;
}

// Copies master values and init specs into a freshly built serial layer.
inline void copy_master(Parameter& serial, const Tensor& master, const Parameter& parallel) {
  serial.value.copy_from(master);
  serial.init = parallel.init;
}

}  // namespace tessera::tp::detail
