#pragma once
// The vocabulary of initialisation: init types and their options (InitSpec), PyTorch's
// fan rule, and the per-parameter stream key. It sits on floor 0 because every
// Parameter carries its InitSpec; the values are drawn by initialize() (init.hpp, on the
// nn floor, which runs it on the block's compute backend).
//
// Init types follow the seeds (ml.models.parallel's init_type, PyTorch's nn.init):
// fan_in / fan_out use PyTorch's rule on the *global* shape: for a weight
// [out, in, k1, k2, ...], fan_in = in * prod(k), fan_out = out * prod(k).
//
// Every type but orthogonal is a function of one element's global index. orthogonal
// is a property of the whole matrix: initialize() builds the master (a QR of a
// Gaussian matrix drawn by global index, in double, on the host) on every rank and
// keeps the rank's block, so it costs O(rows * cols * min(rows, cols)) per rank.

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/tensor.hpp"

namespace tessera {

enum class InitType {
  zeros,
  ones,
  constant,         // value
  normal,           // mean, std
  uniform,          // low, high
  trunc_normal,     // mean, std, truncated to [low, high] (absolute bounds, as nn.init)
  xavier_normal,    // gain
  xavier_uniform,   // gain
  kaiming_normal,   // negative_slope, fan_out_mode (leaky_relu gain, as nn.init)
  kaiming_uniform,  // negative_slope, fan_out_mode
  orthogonal,       // gain: nn.init.orthogonal_ (Q of a Gaussian matrix, R's diagonal made positive)
  biased_normal,    // mean, std: a normal weight whose layer draws its bias from the same normal
  dirac,            // groups: nn.init.dirac_ (nn.init.eye_ for a 2-D weight, groups = 1)
};

std::string_view init_type_name(InitType type) noexcept;  // "xavier_normal", ...
// Throws ConfigError naming `what` and the text.
InitType parse_init_type(std::string_view text, std::string_view what = "init_type");

struct InitSpec {
  InitType type = InitType::zeros;
  double value = 0.0;
  double mean = 0.0, std = 1.0;
  double low = -2.0, high = 2.0;
  double gain = 1.0;
  double negative_slope = 0.0;
  bool fan_out_mode = false;
  std::int64_t groups = 1;  // dirac: out must divide by it
  // The shape of the layer's weight when the parameter stores it reshaped (a strided
  // tensor-parallel shard keeps [out, in] as [stride, out/stride, in]): fans, dirac's
  // positions and orthogonal's rows are those of this shape. Row-major order is the
  // same in both, so the values are too. Empty: the parameter's global shape.
  Shape layer_shape{};

  static InitSpec zeros() { return {InitType::zeros}; }
  static InitSpec ones() { return {InitType::ones}; }
  static InitSpec constant(double v) { InitSpec s{InitType::constant}; s.value = v; return s; }
  static InitSpec normal(double mean, double std) { InitSpec s{InitType::normal}; s.mean = mean; s.std = std; return s; }
  static InitSpec uniform(double low, double high) { InitSpec s{InitType::uniform}; s.low = low; s.high = high; return s; }
  static InitSpec trunc_normal(double mean = 0, double std = 1, double low = -2, double high = 2) {
    InitSpec s{InitType::trunc_normal}; s.mean = mean; s.std = std; s.low = low; s.high = high; return s;
  }
  static InitSpec xavier_normal(double gain = 1.0) { InitSpec s{InitType::xavier_normal}; s.gain = gain; return s; }
  static InitSpec xavier_uniform(double gain = 1.0) { InitSpec s{InitType::xavier_uniform}; s.gain = gain; return s; }
  static InitSpec kaiming_normal(double a = 0.0, bool fan_out = false) {
    InitSpec s{InitType::kaiming_normal}; s.negative_slope = a; s.fan_out_mode = fan_out; return s;
  }
  static InitSpec kaiming_uniform(double a = 0.0, bool fan_out = false) {
    InitSpec s{InitType::kaiming_uniform}; s.negative_slope = a; s.fan_out_mode = fan_out; return s;
  }
  static InitSpec orthogonal(double gain = 1.0) { InitSpec s{InitType::orthogonal}; s.gain = gain; return s; }
  static InitSpec biased_normal(double mean, double std) {
    InitSpec s{InitType::biased_normal}; s.mean = mean; s.std = std; return s;
  }
  static InitSpec dirac(std::int64_t groups = 1) { InitSpec s{InitType::dirac}; s.groups = groups; return s; }
};

// The bias spec of a layer whose weight is `weight` and whose own default bias spec is
// `layer_default`: biased_normal draws the bias from the weight's normal (that is what
// makes it "biased"); every other weight type leaves the layer's default.
InitSpec bias_init_for(const InitSpec& weight, const InitSpec& layer_default);

struct Fans {
  std::int64_t fan_in = 1;
  std::int64_t fan_out = 1;
};
// PyTorch's fan rule on a global shape; throws InvalidArgument for fewer than 2 dims
// when the init type needs fans.
Fans compute_fans(const Shape& global_shape);

// 64-bit FNV-1a of the name: the per-parameter stream key.
std::uint64_t name_key(std::string_view name) noexcept;

}  // namespace tessera
