// Initialisation as a pure function of (seed, parameter name, global element index).
//
// Element g of the master tensor is drawn from Philox block (counter = g, key =
// mix(seed, name_key(name))), so a rank computes exactly the values of its own block,
// whatever the layout, without ever allocating the master tensor. Every element uses
// one 4x32-bit block: uniforms take two words (53 bits), normals take all four
// (Box-Muller, one output per block), truncated normals invert the CDF of one uniform.

#include "tessera/init.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/compute.hpp"
#include "backend/kernel_math.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/normal_quantile.hpp"
#include "tessera/detail/philox.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace {

bool needs_fans(InitType type) {
  return type == InitType::xavier_normal || type == InitType::xavier_uniform ||
         type == InitType::kaiming_normal || type == InitType::kaiming_uniform;
}

std::string num(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

std::string where(std::string_view name, InitType type) {
  return "initialize '" + std::string(name) + "' (" + std::string(init_type_name(type)) + ")";
}

void require_finite(double v, const char* option, std::string_view name, InitType type) {
  if (!std::isfinite(v)) {
    throw InvalidArgument(where(name, type) + ": option " + option + " = " + num(v) + " is not finite");
  }
}

// The per-element sampler: maps an element's Philox block to its value.
struct Sampler {
  InitType kind;       // after reduction: constant, normal, uniform or trunc_normal
  double a = 0, b = 0;  // constant: a; normal: mean a, std b; uniform: [a, b)
  // trunc_normal: sample x on [lo, hi] (standardised), value = clamp(mean + std*x)
  double mean = 0, std = 1, low = 0, high = 0;
  double lo = 0, hi = 0, p_lo = 0, p_width = 0;
  bool flip = false;

  double operator()(const detail::Philox4x32& r) const {
    switch (kind) {
      case InitType::uniform:
        // uniform_in is a + (b - a) u, shared with the CUDA kernel (kernel_math.hpp).
        return detail::uniform_in(a, b, detail::uniform53(r.v[0], r.v[1]));
      case InitType::normal: {
        const double u1 = detail::uniform53_open(r.v[0], r.v[1]);
        const double u2 = detail::uniform53(r.v[2], r.v[3]);
        return a + b * (std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
      }
      case InitType::trunc_normal: {
        const double u = detail::uniform53_open(r.v[0], r.v[1]);
        double x = detail::normal_quantile(p_lo + p_width * u);
        x = std::clamp(x, lo, hi);  // rounding in the quantile may step just outside
        if (flip) x = -x;
        return std::clamp(mean + std * x, low, high);
      }
      default:
        return a;
    }
  }
};

// Reduces a spec (with the global shape's fans) to one of the four sampler kinds,
// validating the options on the way.
Sampler make_sampler(const InitSpec& spec, const Shape& global_shape, std::string_view name) {
  const InitType type = spec.type;
  Sampler s{InitType::constant};
  Fans fans;
  if (needs_fans(type)) {
    if (global_shape.size() < 2) {
      throw InvalidArgument(where(name, type) + ": fan_in/fan_out need a tensor of at least 2 dims, got global shape " +
                            shape_str(global_shape));
    }
    fans = compute_fans(global_shape);
  }
  switch (type) {
    case InitType::zeros: s.a = 0.0; break;
    case InitType::ones: s.a = 1.0; break;
    case InitType::constant:
      require_finite(spec.value, "value", name, type);
      s.a = spec.value;
      break;
    case InitType::normal:
      require_finite(spec.mean, "mean", name, type);
      require_finite(spec.std, "std", name, type);
      if (spec.std < 0) throw InvalidArgument(where(name, type) + ": option std = " + num(spec.std) + " must be >= 0");
      s = {InitType::normal, spec.mean, spec.std};
      break;
    case InitType::uniform:
      require_finite(spec.low, "low", name, type);
      require_finite(spec.high, "high", name, type);
      if (spec.low > spec.high) {
        throw InvalidArgument(where(name, type) + ": option low = " + num(spec.low) + " exceeds high = " +
                              num(spec.high));
      }
      s = {InitType::uniform, spec.low, spec.high};
      break;
    case InitType::xavier_normal:
    case InitType::xavier_uniform: {
      require_finite(spec.gain, "gain", name, type);
      if (spec.gain < 0) throw InvalidArgument(where(name, type) + ": option gain = " + num(spec.gain) + " must be >= 0");
      const double sum = static_cast<double>(fans.fan_in + fans.fan_out);
      if (type == InitType::xavier_normal) {
        s = {InitType::normal, 0.0, sum > 0 ? spec.gain * std::sqrt(2.0 / sum) : 0.0};
      } else {
        const double bound = sum > 0 ? spec.gain * std::sqrt(6.0 / sum) : 0.0;
        s = {InitType::uniform, -bound, bound};
      }
      break;
    }
    case InitType::kaiming_normal:
    case InitType::kaiming_uniform: {
      require_finite(spec.negative_slope, "negative_slope", name, type);
      // nn.init's calculate_gain("leaky_relu", a); a = 0 gives ReLU's sqrt(2).
      const double gain = std::sqrt(2.0 / (1.0 + spec.negative_slope * spec.negative_slope));
      const auto fan = static_cast<double>(spec.fan_out_mode ? fans.fan_out : fans.fan_in);
      const double stdev = fan > 0 ? gain / std::sqrt(fan) : 0.0;
      if (type == InitType::kaiming_normal) {
        s = {InitType::normal, 0.0, stdev};
      } else {
        const double bound = fan > 0 ? gain * std::sqrt(3.0 / fan) : 0.0;
        s = {InitType::uniform, -bound, bound};
      }
      break;
    }
    case InitType::trunc_normal: {
      require_finite(spec.mean, "mean", name, type);
      require_finite(spec.std, "std", name, type);
      require_finite(spec.low, "low", name, type);
      require_finite(spec.high, "high", name, type);
      if (spec.std < 0) throw InvalidArgument(where(name, type) + ": option std = " + num(spec.std) + " must be >= 0");
      if (spec.low > spec.high) {
        throw InvalidArgument(where(name, type) + ": option low = " + num(spec.low) + " exceeds high = " +
                              num(spec.high));
      }
      if (spec.std == 0) {  // a point mass at the mean, clamped into the bounds
        s.a = std::clamp(spec.mean, spec.low, spec.high);
        break;
      }
      s.kind = InitType::trunc_normal;
      s.mean = spec.mean;
      s.std = spec.std;
      s.low = spec.low;
      s.high = spec.high;
      double lo = (spec.low - spec.mean) / spec.std, hi = (spec.high - spec.mean) / spec.std;
      // Work on whichever mirror image lies more in the lower tail, where Phi is
      // accurate in relative terms: an interval such as [5, 6] becomes [-6, -5].
      if (lo + hi > 0) {
        s.flip = true;
        const double t = lo;
        lo = -hi;
        hi = -t;
      }
      s.lo = lo;
      s.hi = hi;
      s.p_lo = detail::normal_cdf(lo);
      s.p_width = detail::normal_cdf(hi) - s.p_lo;
      break;
    }
  }
  return s;
}

// Walks the local block in row-major order; element i of the block has the global flat
// index sum_d (offset[d] + i[d]) * global_stride[d].
template <class T>
void fill_block(Tensor& local, const Shape& global_shape, const Shape& offset, const Sampler& sampler,
                std::uint64_t key) {
  const int nd = local.dim();
  const Shape& shape = local.shape();
  const Shape& strides = local.strides();
  if (local.numel() == 0) return;
  T* base = local.data<T>();
  const bool constant = sampler.kind == InitType::constant;
  const T constant_value = round_from_double<T>(sampler.a);
  if (nd == 0) {
    *base = constant ? constant_value : round_from_double<T>(sampler(detail::philox_element_block(key, 0)));
    return;
  }
  Shape global_strides(nd, 1);
  for (int d = nd - 2; d >= 0; --d) global_strides[d] = global_strides[d + 1] * global_shape[d + 1];

  std::vector<std::int64_t> index(nd, 0);  // over all dims but the last
  const std::int64_t inner = shape[nd - 1];
  const std::int64_t inner_stride = strides[nd - 1];
  while (true) {
    std::int64_t g = offset[nd - 1];
    std::int64_t at = 0;
    for (int d = 0; d < nd - 1; ++d) {
      g += (offset[d] + index[d]) * global_strides[d];
      at += index[d] * strides[d];
    }
    T* row = base + at;
    for (std::int64_t i = 0; i < inner; ++i) {
      row[i * inner_stride] = constant ? constant_value
                                       : round_from_double<T>(sampler(detail::philox_element_block(
                                             key, static_cast<std::uint64_t>(g + i))));
    }
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void initialize(Tensor& local, const Shape& global_shape, const Shape& local_offset, const InitSpec& spec,
                std::uint64_t seed, std::string_view name) {
  const std::string who = where(name, spec.type);
  if (!local.defined()) throw InvalidArgument(who + ": the local tensor is undefined");
  if (local.dtype() != DType::f32 && local.dtype() != DType::f64 && local.dtype() != DType::bf16) {
    throw ShapeError(who + ": local tensor " + local.str() + " must be f32, f64 or bf16");
  }
  if (static_cast<int>(global_shape.size()) != local.dim() || local_offset.size() != global_shape.size()) {
    throw ShapeError(who + ": local tensor " + local.str() + ", global shape " + shape_str(global_shape) +
                     " and local offset " + shape_str(local_offset) + " must have the same number of dims");
  }
  for (int d = 0; d < local.dim(); ++d) {
    if (local_offset[d] < 0 || local_offset[d] + local.size(d) > global_shape[d]) {
      throw ShapeError(who + ": local block " + local.str() + " at offset " + shape_str(local_offset) +
                       " lies outside global shape " + shape_str(global_shape) + " (dim " + std::to_string(d) + ")");
    }
  }
  const Sampler sampler = make_sampler(spec, global_shape, name);
  const std::uint64_t key = detail::philox_stream_key(seed, name_key(name));

  // Constants and uniforms (including the xavier/kaiming uniform variants) are drawn by
  // the block's backend (HostCompute / the CUDA kernel) with the same Philox and the same
  // FMA-free a + (b - a) u, so every backend computes bit-identical values. Normals and
  // truncated normals need log/cos/erfc, whose CUDA versions may differ from glibc's in
  // the last bit: they are always drawn on the host and copied into the block
  // (initialisation runs once), which keeps the master weights bit-identical on every
  // backend.
  if (sampler.kind == InitType::constant || sampler.kind == InitType::uniform) {
    auto& compute = detail::compute_for(local, who + ": local tensor");
    const int nd = local.dim();
    detail::StridedLayout layout;
    layout.ndim = nd;
    std::int64_t offsets[detail::kMaxDims] = {};
    std::int64_t global_strides[detail::kMaxDims] = {};
    std::int64_t stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      layout.shape[d] = local.size(d);
      layout.strides[d] = local.strides()[d];
      offsets[d] = local_offset[d];
      global_strides[d] = stride;
      stride *= global_shape[d];
    }
    compute.init_uniform(local.dtype(), local.data(), layout, offsets, global_strides, key, sampler.a, sampler.b,
                         sampler.kind == InitType::constant, local.device().index);
    return;
  }
  // A host block is its own staging tensor (to() shares it); a device block is staged.
  Tensor target = local.to(Device::host());
  switch (local.dtype()) {
    case DType::f32: fill_block<float>(target, global_shape, local_offset, sampler, key); break;
    case DType::f64: fill_block<double>(target, global_shape, local_offset, sampler, key); break;
    case DType::bf16: fill_block<bfloat16>(target, global_shape, local_offset, sampler, key); break;
    default: break;
  }
  if (target.data() != local.data()) local.copy_from(target);
}

}  // namespace tessera
