#include "tessera/domain/loss.hpp"

#include <cmath>
#include <numbers>

#include "backend/compute.hpp"
#include "tessera/agree.hpp"

namespace tessera::domain {

double latitude_degrees(std::int64_t i, std::int64_t nlat, LatitudeGrid grid) {
  if (nlat < 1 || i < 0 || i >= nlat) {
    throw InvalidArgument("latitude_degrees: row " + std::to_string(i) + " is outside a grid of " +
                          std::to_string(nlat) + " latitudes");
  }
  if (grid == LatitudeGrid::cell_centres) return 90.0 - 180.0 * (static_cast<double>(i) + 0.5) / nlat;
  if (nlat == 1) return 0.0;
  return 90.0 - 180.0 * static_cast<double>(i) / static_cast<double>(nlat - 1);
}

namespace {
double cos_lat(std::int64_t i, std::int64_t nlat, LatitudeGrid grid) {
  return std::cos(latitude_degrees(i, nlat, grid) * std::numbers::pi / 180.0);
}
}  // namespace

Tensor latitude_weights(const Decomposition& d, LatitudeGrid grid) {
  // The normalisation uses every global latitude, computed locally: no communication.
  const std::int64_t nlat = d.global_lat();
  double mean = 0.0;
  for (std::int64_t i = 0; i < nlat; ++i) mean += cos_lat(i, nlat, grid);
  mean /= static_cast<double>(nlat);
  const ShardRange rows = d.box().lat;
  Tensor w = Tensor::empty({rows.length}, DType::f64);
  auto* p = w.data<double>();
  for (std::int64_t k = 0; k < rows.length; ++k) p[k] = cos_lat(rows.start + k, nlat, grid) / mean;
  return w;
}

LossResult lat_weighted_mse(const Tensor& prediction, const Tensor& target, const Decomposition& d,
                            LatitudeGrid grid) {
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
  });
  const Tensor p = prediction.contiguous(), t = target.contiguous();
  const std::int64_t planes = p.numel() / (box.lat.length * box.lon.length);
  const double count = static_cast<double>(planes) * static_cast<double>(d.global_lat()) *
                       static_cast<double>(d.global_lon());
  LossResult result;
  result.grad = Tensor::empty(p.shape(), p.dtype(), p.device());
  const Tensor w = latitude_weights(d, grid).to(p.device());
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
