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

}  // namespace tessera::domain
