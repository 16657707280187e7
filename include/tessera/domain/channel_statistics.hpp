#pragma once
// Normalisation statistics from a code's own fields: the per-channel mean and standard
// deviation of a decomposed field over every step given, for data.normalize (the online
// trainer's mean and std), computed where the fields already are.
//
// add() takes this rank's block of one step's fields, (samples..., C, local lat, local
// lon); finish() returns, per channel c over every sample, step, latitude and longitude
// (plain, not area-weighted; the population std, as numpy's mean/std and
// `tessera-run stats`):
//
//   mean_c = S_c / n,  std_c = sqrt(max(Q_c / n - mean_c^2, 0)),
//
// where S_c = sum of x and Q_c = sum of x * x (each product rounded once) are exact
// sums (ExactSums), carried as double-double pairs into the division and the
// subtraction, so the nearly equal terms of the variance (280 K air varying by 0.5 K:
// mean^2 / var ~ 3e5) cost no digits a double would keep. The result depends only on the
// values, never on their order: bit-identical at every rank count, decomposition and
// grouping of the steps.
//
// A constant channel (a land mask, a fixed forcing) has std 0, and normalising by it
// would divide by zero: its std is raised to the floor
//   floor_c = relative_floor * max(|mean_c|, 1)       (relative_floor 1e-6 by default)
// and reported in `floored`, so the normalised channel is 0 where the field equals its
// mean and no value is amplified more than 1e6 times.

#include <cstdint>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/global_sum.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

struct ChannelMoments {
  std::int64_t count = 0;     // values per channel (samples x steps x nlat x nlon)
  std::vector<double> mean, std;
  std::vector<bool> floored;  // std raised to the floor (a constant channel)
};

class ChannelStatistics {
 public:
  // `channels` >= 1 channels of fields decomposed by `decomposition` (which must outlive
  // this object).
  ChannelStatistics(const Decomposition& decomposition, std::int64_t channels);

  // One step's fields: (samples..., C, local lat, local lon), this rank's box, f32 or f64,
  // any strides, host or device. Collective over the decomposition's communicator only to
  // agree on argument errors (a wrong shape on one rank throws on every rank).
  void add(const Tensor& local);
  // Collective: the statistics of everything added so far on every rank. InvalidArgument
  // before any add, or for a relative_floor that is not finite and > 0.
  ChannelMoments finish(double relative_floor = 1e-6) const;

 private:
  const Decomposition* d_;
  std::int64_t channels_;
  std::int64_t count_ = 0;  // values per channel on every rank together
  ExactSums sums_;          // S_0, Q_0, S_1, Q_1, ...
};

}  // namespace tessera::domain
