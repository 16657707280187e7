// ChannelStatistics: per-channel moments from exact sums (channel_statistics.hpp).

#include "tessera/domain/channel_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::domain {

ChannelStatistics::ChannelStatistics(const Decomposition& decomposition, std::int64_t channels)
    : d_(&decomposition), channels_(channels), sums_(2 * static_cast<std::size_t>(std::max<std::int64_t>(channels, 0))) {
  if (channels < 1) throw InvalidArgument("ChannelStatistics: " + std::to_string(channels) + " channels");
}

void ChannelStatistics::add(const Tensor& local) {
  Tensor host;
  std::int64_t samples = 0;
  agree_on_success(d_->comm().mpi_comm(), [&] {
    const std::string what = "ChannelStatistics::add";
    require_usable(local, what);
    const LocalBox box = d_->box();
    if (local.dim() < 3 || local.size(local.dim() - 3) != channels_ || local.size(local.dim() - 2) != box.lat.length ||
        local.size(local.dim() - 1) != box.lon.length) {
      throw ShapeError(what + ": domain rank " + std::to_string(d_->rank()) + " passed " + local.str() +
                       "; expected (samples..., " + std::to_string(channels_) + " channels, " +
                       std::to_string(box.lat.length) + ", " + std::to_string(box.lon.length) + ") for its box " +
                       box.str());
    }
    if (local.dtype() != DType::f32 && local.dtype() != DType::f64) {
      throw InvalidArgument(what + ": dtype " + std::string(dtype_name(local.dtype())) + " is not f32 or f64");
    }
    host = tessera::ops::cast(local.to(Device::host()), DType::f64);
    samples = local.numel() / (channels_ * box.lat.length * box.lon.length);
  });
  const std::int64_t plane = d_->box().lat.length * d_->box().lon.length;
  const double* x = host.data<double>();
  for (std::int64_t s = 0; s < samples; ++s) {
    for (std::int64_t c = 0; c < channels_; ++c) {
      const double* p = x + (s * channels_ + c) * plane;
      for (std::int64_t k = 0; k < plane; ++k) {
        sums_.add(2 * static_cast<std::size_t>(c), p[k]);
        sums_.add(2 * static_cast<std::size_t>(c) + 1, p[k] * p[k]);
      }
    }
  }
  // Every rank adds the same number of samples' worth of the global grid.
  count_ += samples * d_->global_lat() * d_->global_lon();
}

namespace {

// Double-double arithmetic (a value hi + lo, |lo| <= ulp(hi) / 2) for the variance, whose
// subtraction of nearly equal terms would otherwise lose mean^2 / var of the digits.
struct DoubleDouble {
  double hi = 0, lo = 0;
};

DoubleDouble two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

DoubleDouble normalized(double hi, double lo) { return two_sum(hi, lo); }

DoubleDouble divided(DoubleDouble a, double n) {
  const double q1 = a.hi / n;
  const double r = std::fma(-q1, n, a.hi) + a.lo;
  return normalized(q1, r / n);
}

DoubleDouble squared(DoubleDouble a) {
  const double p = a.hi * a.hi;
  return normalized(p, std::fma(a.hi, a.hi, -p) + 2.0 * a.hi * a.lo);
}

DoubleDouble minus(DoubleDouble a, DoubleDouble b) {
  const DoubleDouble s = two_sum(a.hi, -b.hi);
  return normalized(s.hi, s.lo + (a.lo - b.lo));
}

}  // namespace

ChannelMoments ChannelStatistics::finish(double relative_floor) const {
  // Agreed: a floor bad on one rank alone must not leave the others in the reduction.
  agree_on_success(d_->comm().mpi_comm(), [&] {
    if (!(relative_floor > 0) || !std::isfinite(relative_floor)) {
      throw InvalidArgument("ChannelStatistics::finish: the relative floor " + std::to_string(relative_floor) +
                            " must be finite and > 0");
    }
    if (count_ == 0) throw InvalidArgument("ChannelStatistics::finish: no field was added");
  });
  const auto totals = sums_.totals_split(d_->comm());
  ChannelMoments m;
  m.count = count_;
  const auto n = static_cast<double>(count_);
  for (std::int64_t c = 0; c < channels_; ++c) {
    const auto [s_hi, s_lo] = totals[2 * static_cast<std::size_t>(c)];
    const auto [q_hi, q_lo] = totals[2 * static_cast<std::size_t>(c) + 1];
    const DoubleDouble mean_dd = divided({s_hi, s_lo}, n);
    const DoubleDouble var_dd = minus(divided({q_hi, q_lo}, n), squared(mean_dd));
    const double mean = mean_dd.hi + mean_dd.lo;
    const double variance = var_dd.hi + var_dd.lo;
    const double floor = relative_floor * std::max(std::abs(mean), 1.0);
    const double std = std::sqrt(std::max(variance, 0.0));
    m.mean.push_back(mean);
    m.std.push_back(std < floor ? floor : std);
    m.floored.push_back(std < floor);
  }
  return m;
}

}  // namespace tessera::domain
