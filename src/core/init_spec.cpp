// The vocabulary of initialisation (init_spec.hpp): init type names, PyTorch's fan rule
// and the per-parameter stream key. The values themselves are drawn by initialize()
// (src/nn/init.cpp), which runs on the block's compute backend.

#include "tessera/init_spec.hpp"

#include <array>
#include <string>

#include "tessera/detail/fnv1a.hpp"
#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

namespace {

constexpr std::array<InitType, 13> kAllTypes = {
    InitType::zeros,          InitType::ones,            InitType::constant,       InitType::normal,
    InitType::uniform,        InitType::trunc_normal,    InitType::xavier_normal,  InitType::xavier_uniform,
    InitType::kaiming_normal, InitType::kaiming_uniform, InitType::orthogonal,     InitType::biased_normal,
    InitType::dirac};

}  // namespace

constexpr tessera::detail::EnumName<InitType> kInitTypeNames[] = {
    {InitType::zeros, "zeros"},
    {InitType::ones, "ones"},
    {InitType::constant, "constant"},
    {InitType::normal, "normal"},
    {InitType::uniform, "uniform"},
    {InitType::trunc_normal, "trunc_normal"},
    {InitType::xavier_normal, "xavier_normal"},
    {InitType::xavier_uniform, "xavier_uniform"},
    {InitType::kaiming_normal, "kaiming_normal"},
    {InitType::kaiming_uniform, "kaiming_uniform"},
    {InitType::orthogonal, "orthogonal"},
    {InitType::biased_normal, "biased_normal"},
    {InitType::dirac, "dirac"},
};

std::string_view init_type_name(InitType type) noexcept { return tessera::detail::name_of(kInitTypeNames, type); }

InitType parse_init_type(std::string_view text, std::string_view what) {
  for (InitType t : kAllTypes) {
    if (init_type_name(t) == text) return t;
  }
  std::string known;
  for (InitType t : kAllTypes) known += (known.empty() ? "" : ", ") + std::string(init_type_name(t));
  throw ConfigError(std::string(what) + ": init type '" + std::string(text) + "' is unknown (supported: " + known +
                    ")");
}

InitSpec bias_init_for(const InitSpec& weight, const InitSpec& layer_default) {
  return weight.type == InitType::biased_normal ? InitSpec::normal(weight.mean, weight.std) : layer_default;
}

Fans compute_fans(const Shape& global_shape) {
  if (global_shape.size() < 2) {
    throw InvalidArgument("compute_fans: fan_in/fan_out need a tensor of at least 2 dims, got shape " +
                          shape_str(global_shape));
  }
  std::int64_t receptive = 1;
  for (std::size_t d = 2; d < global_shape.size(); ++d) receptive *= global_shape[d];
  return {global_shape[1] * receptive, global_shape[0] * receptive};
}

std::uint64_t name_key(std::string_view name) noexcept { return detail::fnv1a64(name); }

}  // namespace tessera
