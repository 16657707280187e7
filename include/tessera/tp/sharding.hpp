#pragma once
// Placement-driven helpers shared by every tensor-parallel layer: create a parameter
// sharded over the tp group, cut a shard out of a master tensor, and reassemble the
// master from the shards. They read Parameter::placement.tp, so no layer type is
// special-cased.

#include <string>

#include "tessera/comm.hpp"
#include "tessera/parameter.hpp"

namespace tessera::tp {

// A zero-initialised parameter of master shape `global_shape`, sharded over `tp` along
// `dim` (placement tp: Shard(dim)); this rank holds block tp.rank() of tp.size() under
// the partition rule shard_range: an extent that does not divide by the tp size leaves
// the first extent % tp ranks one row more, at local_offset = its shard_range start (so
// a checkpoint, which writes each block at its offset with its shape, needs nothing
// else). An extent smaller than the tp size is a ShapeError naming `layer`, the
// parameter, the dim, its extent and the tp size.
Parameter make_tp_sharded(const std::string& layer, const std::string& parameter, const Shape& global_shape,
                          int dim, const Communicator& tp, DType dtype, Device device, const InitSpec& init);

// Copies this rank's block of `master` (shape == p.global_shape) into p.value.
void load_shard_from_master(Parameter& p, const Tensor& master, const std::string& what);

// The master tensor assembled from every rank's `local` block (p.value, p.grad or
// optimizer state of p's shape). Collective over `tp` when p is tp-sharded; a copy of
// `local` when p is replicated over tp.
Tensor assemble_master(const Parameter& p, const Tensor& local, Communicator& tp);

}  // namespace tessera::tp
