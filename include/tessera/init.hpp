#pragma once
// Initialisation as a pure function of (seed, parameter name, global element index).
//
// Each element of a parameter's *master* tensor gets a value computed from a
// counter-based generator (Philox-4x32-10) keyed by the seed and a hash of the
// parameter's fully-qualified name, counting by the element's global flat index. A
// rank fills only its own shard, never materialising the master weight, and the master
// weights are bit-identical at every tp/dp/domain layout and on every backend. The one
// exception is orthogonal, a property of the whole matrix: every rank builds that
// master (deterministically, in double, on the host) and keeps its block, so it is
// still bit-identical at every layout. The init types and their options are in
// init_spec.hpp.

#include <cstdint>
#include <string_view>

#include "tessera/init_spec.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

// Fills `local`, the block of a tensor of `global_shape` that starts at `local_offset`
// (one start index per dim), with the values the whole tensor would get, on any device
// (f32/f64/bf16; values are computed in double, then rounded).
void initialize(Tensor& local, const Shape& global_shape, const Shape& local_offset, const InitSpec& spec,
                std::uint64_t seed, std::string_view name);

}  // namespace tessera
