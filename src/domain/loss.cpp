#include "tessera/domain/loss.hpp"

#include <cmath>
#include <numbers>
#include <utility>

#include "backend/compute.hpp"
#include "tessera/agree.hpp"

namespace tessera::domain {

LatitudeSpec LatitudeSpec::from_latitudes(std::vector<double> degrees) {
  LatitudeSpec spec(LatitudeGrid::explicit_rows);
  spec.degrees = std::move(degrees);
  return spec;
}

void LatitudeSpec::validate(std::int64_t nlat) const {
  if (grid != LatitudeGrid::explicit_rows) {
    if (!degrees.empty()) {
      throw InvalidArgument("latitude weights: " + std::to_string(degrees.size()) +
                            " latitudes given for a built-in grid (they are for explicit_rows)");
    }
    return;
  }
  if (static_cast<std::int64_t>(degrees.size()) != nlat) {
    throw InvalidArgument("latitude weights: " + std::to_string(degrees.size()) + " latitudes for a grid of " +
                          std::to_string(nlat) + " rows (one per row)");
  }
  double total = 0.0;
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    if (!std::isfinite(degrees[i]) || degrees[i] < -90.0 || degrees[i] > 90.0) {
      throw InvalidArgument("latitude weights: row " + std::to_string(i) + " has latitude " +
                            std::to_string(degrees[i]) + ", outside [-90, 90] degrees");
    }
    total += std::cos(degrees[i] * std::numbers::pi / 180.0);
  }
  if (!(total > 1e-12)) {
    throw InvalidArgument("latitude weights: every row lies at a pole, so every cos(latitude) weight is 0 "
                          "(use unweighted)");
  }
}

double latitude_degrees(std::int64_t i, std::int64_t nlat, const LatitudeSpec& spec) {
  if (nlat < 1 || i < 0 || i >= nlat) {
    throw InvalidArgument("latitude_degrees: row " + std::to_string(i) + " is outside a grid of " +
                          std::to_string(nlat) + " latitudes");
  }
  switch (spec.grid) {
    case LatitudeGrid::cell_centres: return 90.0 - 180.0 * (static_cast<double>(i) + 0.5) / nlat;
    case LatitudeGrid::with_poles:
      return nlat == 1 ? 0.0 : 90.0 - 180.0 * static_cast<double>(i) / static_cast<double>(nlat - 1);
    case LatitudeGrid::explicit_rows:
      spec.validate(nlat);
      return spec.degrees[static_cast<std::size_t>(i)];
    case LatitudeGrid::unweighted: break;
  }
  throw InvalidArgument("latitude_degrees: an unweighted grid has no latitudes");
}

namespace {
double row_weight(std::int64_t i, std::int64_t nlat, const LatitudeSpec& spec) {
  if (spec.grid == LatitudeGrid::unweighted) return 1.0;
  const double phi = spec.grid == LatitudeGrid::explicit_rows ? spec.degrees[static_cast<std::size_t>(i)]
                                                               : latitude_degrees(i, nlat, spec);
  return std::cos(phi * std::numbers::pi / 180.0);
}
}  // namespace

Tensor latitude_weights(const Decomposition& d, const LatitudeSpec& spec) {
  // The normalisation uses every global latitude, computed locally: no communication.
  const std::int64_t nlat = d.global_lat();
  spec.validate(nlat);
  double mean = 0.0;
  for (std::int64_t i = 0; i < nlat; ++i) mean += row_weight(i, nlat, spec);
  mean /= static_cast<double>(nlat);
  const ShardRange rows = d.box().lat;
  Tensor w = Tensor::empty({rows.length}, DType::f64);
  auto* p = w.data<double>();
  for (std::int64_t k = 0; k < rows.length; ++k) p[k] = row_weight(rows.start + k, nlat, spec) / mean;
  return w;
}

LossResult lat_weighted_mse(const Tensor& prediction, const Tensor& target, const Decomposition& d,
                            const LatitudeSpec& spec) {
  const LocalBox box = d.box();
  agree_on_success(d.comm().mpi_comm(), [&] {
    const std::string what = "lat_weighted_mse";
    if (!prediction.defined() || !target.defined()) throw InvalidArgument(what + ": prediction or target is undefined");
    if (prediction.dim() < 2 || prediction.size(prediction.dim() - 2) != box.lat.length ||
        prediction.size(prediction.dim() - 1) != box.lon.length) {
      throw ShapeError(what + ": prediction " + prediction.str() + " on domain rank " + std::to_string(d.rank()) +
                       " must end in its local extents (" + std::to_string(box.lat.length) + ", " +
                       std::to_string(box.lon.length) + ") (" + box.str() + ")");
    }
    if (target.shape() != prediction.shape() || target.dtype() != prediction.dtype()) {
      throw ShapeError(what + ": target " + target.str() + " and prediction " + prediction.str() +
                       " differ in shape or dtype");
    }
    if (prediction.dtype() != DType::f32 && prediction.dtype() != DType::f64) {
      throw ShapeError(what + ": prediction " + prediction.str() + " must be f32 or f64");
    }
    if (!(target.device() == prediction.device())) {
      throw InvalidArgument(what + ": target " + target.str() + " and prediction " + prediction.str() +
                            " are on different devices");
    }
    require_usable(prediction, what + ": prediction");
    spec.validate(d.global_lat());
  });
  const Tensor p = prediction.contiguous(), t = target.contiguous();
  const std::int64_t planes = p.numel() / (box.lat.length * box.lon.length);
  const double count = static_cast<double>(planes) * static_cast<double>(d.global_lat()) *
                       static_cast<double>(d.global_lon());
  LossResult result;
  result.grad = Tensor::empty(p.shape(), p.dtype(), p.device());
  const Tensor w = latitude_weights(d, spec).to(p.device());
  const double local = tessera::detail::compute_for(p, "lat_weighted_mse: prediction")
                           .weighted_squared_error(p.dtype(), p.data(), t.data(), w.data<double>(), planes,
                                                   box.lat.length, box.lon.length, 2.0 / count, result.grad.data(),
                                                   p.device().index);
  Tensor total = Tensor::from_vector<double>({local}, {1});
  d.comm().all_reduce(total, ReduceOp::sum);
  result.value = total.to_vector<double>()[0] / count;
  return result;
}

}  // namespace tessera::domain
