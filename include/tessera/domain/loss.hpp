#pragma once
// Latitude-weighted mean-squared error over a field split by a Decomposition.
//
//   loss = 1/N * sum over (leading..., i, j) of w_i * (prediction - target)^2
//
// N counts every element of the *global* field (leading numel x nlat x nlon), so the
// value equals the serial loss of the gathered field whatever the split. w_i =
// cos(phi_i) / mean over all global latitudes of cos(phi), i.e. normalised to mean 1
// (the WeatherBench / CREDIT convention), with phi from the *global* latitude index:
//
//   LatitudeGrid::with_poles     phi_i = 90 - 180 i / (nlat - 1)   (both poles included,
//                                the 721-row ERA5 grid; the pole rows get weight ~0)
//   LatitudeGrid::cell_centres   phi_i = 90 - 180 (i + 0.5) / nlat
//
// Row 0 is the north pole; cos is even, so a south-first grid gets the same weights.

#include <cstdint>

#include "tessera/domain/decomposition.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

enum class LatitudeGrid { with_poles, cell_centres };

// Latitude of global row `i` in degrees.
double latitude_degrees(std::int64_t i, std::int64_t nlat, LatitudeGrid grid);
// The normalised weights of this rank's rows: f64 [local_lat].
Tensor latitude_weights(const Decomposition& decomposition, LatitudeGrid grid);

struct LossResult {
  double value = 0.0;  // identical on every rank of the domain communicator
  Tensor grad;         // d loss / d prediction, this rank's block, prediction's dtype
};

// prediction, target: (leading..., local_lat, local_lon), f32 or f64, same shape, the same
// leading dims on every rank. One all-reduce over the decomposition's communicator
// (plus one to agree on argument errors, so a bad shape on one rank throws everywhere).
LossResult lat_weighted_mse(const Tensor& prediction, const Tensor& target, const Decomposition& decomposition,
                            LatitudeGrid grid = LatitudeGrid::with_poles);

}  // namespace tessera::domain
