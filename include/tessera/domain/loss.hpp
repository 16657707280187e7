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
//   LatitudeGrid::explicit_rows  phi_i = the caller's latitude of global row i (a
//                                regional or limited-area grid, any spacing, any order)
//   LatitudeGrid::unweighted     w_i = 1 (a plane, or a grid the caller weights itself)
//
// Row 0 is the north pole; cos is even, so a south-first grid gets the same weights.
// The mean is taken over the grid's own rows, so a regional grid (65-86.5 N) is weighted
// as itself, not as a slice of a global one.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

enum class LatitudeGrid { with_poles, cell_centres, explicit_rows, unweighted };

// The geometry the weights come from: a built-in global grid, or the caller's latitudes.
struct LatitudeSpec {
  LatitudeGrid grid = LatitudeGrid::cell_centres;
  std::vector<double> degrees;  // explicit_rows: every global row's latitude, in [-90, 90]
  LatitudeSpec() = default;
  LatitudeSpec(LatitudeGrid g) : grid(g) {}  // NOLINT: a built-in grid reads as its spec
  static LatitudeSpec from_latitudes(std::vector<double> degrees);
  // InvalidArgument unless it describes `nlat` rows: explicit_rows with nlat finite
  // latitudes in [-90, 90], not all at a pole (no weight left); no latitudes otherwise.
  void validate(std::int64_t nlat) const;
  bool operator==(const LatitudeSpec&) const = default;
};

// Latitude of global row `i` in degrees (with_poles, cell_centres, explicit_rows).
double latitude_degrees(std::int64_t i, std::int64_t nlat, const LatitudeSpec& spec);
// The normalised weights of this rank's rows: f64 [local_lat].
Tensor latitude_weights(const Decomposition& decomposition, const LatitudeSpec& spec);

struct LossResult {
  double value = 0.0;  // identical on every rank of the domain communicator
  Tensor grad;         // d loss / d prediction, this rank's block, prediction's dtype
};

// prediction, target: (leading..., local_lat, local_lon), f32 or f64, same shape, the same
// leading dims on every rank. One all-reduce over the decomposition's communicator
// (plus one to agree on argument errors, so a bad shape on one rank throws everywhere).
LossResult lat_weighted_mse(const Tensor& prediction, const Tensor& target, const Decomposition& decomposition,
                            const LatitudeSpec& spec = LatitudeGrid::with_poles);

}  // namespace tessera::domain
