// Initialisation as a pure function of (seed, parameter name, global element index).
//
// Element g of the master tensor is drawn from Philox block (counter = g, key =
// mix(seed, name_key(name))), so a rank computes exactly the values of its own block,
// whatever the layout, without ever allocating the master tensor. Every element uses
// one 4x32-bit block: uniforms take two words (53 bits), normals take all four
// (Box-Muller, one output per block), truncated normals invert the CDF of one uniform.
// dirac is exact 0/1 values by position. orthogonal is the one exception to "never
// the master": see orthogonal_master below.

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

void check_normal_options(const InitSpec& spec, std::string_view name) {
  require_finite(spec.mean, "mean", name, spec.type);
  require_finite(spec.std, "std", name, spec.type);
  if (spec.std < 0) throw InvalidArgument(where(name, spec.type) + ": option std = " + num(spec.std) + " must be >= 0");
}

// Reduces a spec (with the global shape's fans) to one of the four sampler kinds,
// validating the options on the way. orthogonal and dirac are not samplers (below).
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
    case InitType::biased_normal:  // the weight itself is a plain normal (bias_init_for)
      check_normal_options(spec, name);
      s = {InitType::normal, spec.mean, spec.std};
      break;
    case InitType::orthogonal:
    case InitType::dirac:
      throw InternalError(where(name, type) + ": not a per-element sampler");
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
// index g = sum_d (offset[d] + i[d]) * global_stride[d] and gets value(g), rounded to T.
template <class T, class Value>
void fill_block(Tensor& local, const Shape& global_shape, const Shape& offset, const Value& value) {
  const int nd = local.dim();
  const Shape& shape = local.shape();
  const Shape& strides = local.strides();
  if (local.numel() == 0) return;
  T* base = local.data<T>();
  if (nd == 0) {
    *base = round_from_double<T>(value(std::int64_t{0}));
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
    for (std::int64_t i = 0; i < inner; ++i) row[i * inner_stride] = round_from_double<T>(value(g + i));
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// nn.init.dirac_ on a [out, in, k...] weight: W[g * out/groups + d, d, centre] = 1 for
// d < min(out/groups, in), with centre = k // 2 in every spatial dim; 0 elsewhere. A
// 2-D weight has no spatial dims and gets nn.init.eye_ (groups = 1).
struct Dirac {
  std::int64_t in = 1, per_group = 1, smallest = 0, spatial = 1, centre = 0;

  double operator()(std::int64_t g) const {
    if (g % spatial != centre) return 0.0;
    const std::int64_t cell = g / spatial;  // the (out, in) pair
    const std::int64_t i = cell % in, d = (cell / in) % per_group;
    return i == d && d < smallest ? 1.0 : 0.0;
  }
};

Dirac make_dirac(const InitSpec& spec, const Shape& global_shape, std::string_view name) {
  const InitType type = spec.type;
  if (global_shape.size() < 2 || global_shape.size() > 5) {
    throw InvalidArgument(where(name, type) + ": needs a weight of 2 to 5 dims ([out, in] or [out, in, k...]), "
                          "got global shape " + shape_str(global_shape));
  }
  if (spec.groups < 1 || global_shape[0] % spec.groups != 0) {
    throw InvalidArgument(where(name, type) + ": option groups = " + std::to_string(spec.groups) +
                          " must be >= 1 and divide dim 0 (" + std::to_string(global_shape[0]) + ")");
  }
  if (global_shape.size() == 2 && spec.groups != 1) {
    throw InvalidArgument(where(name, type) + ": a 2-D weight takes groups = 1 (nn.init.eye_), got groups = " +
                          std::to_string(spec.groups));
  }
  Dirac d;
  d.in = global_shape[1];
  d.per_group = global_shape[0] / spec.groups;
  d.smallest = std::min(d.per_group, d.in);
  for (std::size_t k = 2; k < global_shape.size(); ++k) {
    d.centre = d.centre * global_shape[k] + global_shape[k] / 2;
    d.spatial *= global_shape[k];
  }
  return d;
}

// sum_{i in [begin, end)} a[i] * b[i] with four interleaved partial sums, added in a fixed
// order: the same bits on every rank, and independent chains the compiler can vectorise
// (a single running sum cannot be reordered without -ffast-math).
double dot(const double* a, const double* b, std::int64_t begin, std::int64_t end) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < end; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// nn.init.orthogonal_: view the master as [rows, cols] = [dim 0, the rest]; draw a
// standard normal G of that shape (element g from Philox block g, exactly the values
// InitSpec::normal(0, 1) gives the same name); take the QR of G (of G^T when rows <
// cols) with R's diagonal made positive, which makes Q unique; the master is gain * Q
// (gain * Q^T). Q is found by Householder reflections, in double, with plain loops in a
// fixed order, so every rank — at any layout, on any backend — builds the same master
// bit for bit and keeps its own block. This is the one init type that materialises the
// master (rows * cols doubles, and min(rows, cols) reflectors of work), because
// orthogonality is a property of the whole matrix, not of one element.
std::vector<double> orthogonal_master(const Shape& global_shape, double gain, std::uint64_t key) {
  const std::int64_t rows = global_shape[0];
  const std::int64_t cols = shape_numel(global_shape) / rows;
  const bool transpose = rows < cols;
  const std::int64_t m = transpose ? cols : rows, n = transpose ? rows : cols;  // m >= n
  const Sampler standard{InitType::normal, 0.0, 1.0};
  // A: m x n, column-major (column j at a[j * m]), so reflections sweep contiguous memory.
  std::vector<double> a(static_cast<std::size_t>(m * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = standard(detail::philox_element_block(key, static_cast<std::uint64_t>(r * cols + c)));
      a[static_cast<std::size_t>(transpose ? r * m + c : c * m + r)] = v;  // A = G^T or G
    }
  }
  // Householder QR: reflector k maps A[k:, k] onto alpha_k e_k; v_k kept in place of the
  // column (unit-normalised so that H_k = I - 2 v v^T), alpha_k = R's diagonal.
  std::vector<double> alpha(static_cast<std::size_t>(n));
  auto col = [&](std::vector<double>& x, std::int64_t j) { return x.data() + j * m; };
  for (std::int64_t k = 0; k < n; ++k) {
    double* v = col(a, k);
    const double norm = std::sqrt(dot(v, v, k, m));
    // The sign that avoids cancellation in v[k] - alpha.
    alpha[k] = v[k] > 0 ? -norm : norm;
    v[k] -= alpha[k];
    const double vnorm2 = dot(v, v, k, m);
    if (vnorm2 == 0) continue;  // a zero column: H_k = I (probability zero for Gaussian data)
    const double inv = 1.0 / std::sqrt(vnorm2);
    for (std::int64_t i = k; i < m; ++i) v[i] *= inv;
    for (std::int64_t j = k + 1; j < n; ++j) {
      double* x = col(a, j);
      const double twice = 2 * dot(v, x, k, m);
      for (std::int64_t i = k; i < m; ++i) x[i] -= twice * v[i];
    }
  }
  // Q = H_0 ... H_{n-1} [I_n; 0], applied backwards so H_k touches rows k.. only.
  std::vector<double> q(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t j = 0; j < n; ++j) q[static_cast<std::size_t>(j * m + j)] = 1.0;
  for (std::int64_t k = n - 1; k >= 0; --k) {
    const double* v = col(a, k);
    for (std::int64_t j = k; j < n; ++j) {
      double* x = col(q, j);
      const double twice = 2 * dot(v, x, k, m);
      for (std::int64_t i = k; i < m; ++i) x[i] -= twice * v[i];
    }
  }
  // R's diagonal is alpha; a positive diagonal flips column k of Q where alpha_k < 0.
  // The result is row-major [rows, cols]: Q itself, or Q^T.
  std::vector<double> w(static_cast<std::size_t>(rows * cols));
  for (std::int64_t j = 0; j < n; ++j) {
    const double s = alpha[j] < 0 ? -gain : gain;
    for (std::int64_t i = 0; i < m; ++i) {
      w[static_cast<std::size_t>(transpose ? j * cols + i : i * cols + j)] = s * q[static_cast<std::size_t>(j * m + i)];
    }
  }
  return w;
}

template <class Value>
void fill_on_host(Tensor& local, const Shape& global_shape, const Shape& local_offset, const Value& value) {
  // A host block is its own staging tensor (to() shares it); a device block is staged.
  Tensor target = local.to(Device::host());
  switch (local.dtype()) {
    case DType::f32: fill_block<float>(target, global_shape, local_offset, value); break;
    case DType::f64: fill_block<double>(target, global_shape, local_offset, value); break;
    case DType::bf16: fill_block<bfloat16>(target, global_shape, local_offset, value); break;
    default: break;
  }
  if (target.data() != local.data()) local.copy_from(target);
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
  // The shape the distribution sees: the layer's weight, which a strided shard stores
  // reshaped (same row-major order, so flat index g is the same element in both).
  const Shape& layer_shape = spec.layer_shape.empty() ? global_shape : spec.layer_shape;
  if (shape_numel(layer_shape) != shape_numel(global_shape)) {
    throw ShapeError(who + ": layer shape " + shape_str(layer_shape) + " and global shape " +
                     shape_str(global_shape) + " hold different numbers of elements");
  }
  const std::uint64_t key = detail::philox_stream_key(seed, name_key(name));
  if (spec.type == InitType::dirac) {
    fill_on_host(local, global_shape, local_offset, make_dirac(spec, layer_shape, name));
    return;
  }
  if (spec.type == InitType::orthogonal) {
    if (layer_shape.size() < 2) {
      throw InvalidArgument(who + ": needs a tensor of at least 2 dims, got global shape " + shape_str(layer_shape));
    }
    require_finite(spec.gain, "gain", name, spec.type);
    if (local.numel() == 0 || shape_numel(layer_shape) == 0) return;
    const std::vector<double> master = orthogonal_master(layer_shape, spec.gain, key);
    fill_on_host(local, global_shape, local_offset,
                 [&](std::int64_t g) { return master[static_cast<std::size_t>(g)]; });
    return;
  }
  const Sampler sampler = make_sampler(spec, layer_shape, name);

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
  fill_on_host(local, global_shape, local_offset,
               [&](std::int64_t g) { return sampler(detail::philox_element_block(key, static_cast<std::uint64_t>(g))); });
}

}  // namespace tessera
