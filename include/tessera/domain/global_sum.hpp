#pragma once
// The sum of a decomposed field that is the same to the last bit at every
// decomposition: conservation diagnostics (total mass, energy) that a climate code
// compares across runs on different rank counts.
//
// A floating-point sum depends on the order of its additions, and the order follows
// the decomposition. global_sum adds every value exactly instead, into a fixed-point
// integer accumulator wide enough for any double (2^-1152 to 2^1088 in base-2^32
// digits, src/domain/global_sum.cpp), sums the ranks' accumulators as integers
// (MPI_SUM of int64 digits: associative, so any reduction order gives the same
// integer), and rounds once, to nearest-even. The result is the correctly rounded
// exact sum: bit-identical at every decomposition and rank count, and often more
// accurate than any ordinary summation. Cost: a few integer operations per element.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

// The exact sum, rounded once, of every element of every rank's `local` box (leading...,
// local lat, local lon: the decomposition's local_shape for some leading dims; for a
// halo-padded field, HaloExchange::interior(padded)). f32, f64 or bf16, any strides,
// host or CUDA (copied to the host). NaN if any element is NaN or the infinities
// include both signs; +-inf if any is infinite. Collective over d.comm(); a shape
// error on any rank throws the same InvalidArgument/ShapeError on every rank.
double global_sum(const Decomposition& d, const Tensor& local);

// Several exact sums accumulated over many calls (a statistic over the steps of a run):
// add() is local and exact, totals() collective (one all-reduce of the digits) and rounds
// each sum once, so the totals are bit-identical however the values were split over
// ranks and calls. global_sum is one ExactSums of one field.
class ExactSums {
 public:
  explicit ExactSums(std::size_t count);
  ~ExactSums();
  ExactSums(ExactSums&&) noexcept;
  ExactSums& operator=(ExactSums&&) noexcept;

  std::size_t size() const;
  void add(std::size_t index, double value);
  // Collective over `comm`: every rank's sums added, each rounded once.
  std::vector<double> totals(Communicator& comm) const;
  // The same as double-double pairs (hi, lo): hi the rounded sum, lo the rounded rest
  // (exact sum - hi), for results that subtract nearly equal sums (a variance).
  std::vector<std::pair<double, double>> totals_split(Communicator& comm) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::domain
