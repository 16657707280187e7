#pragma once
// sync_domain_gradients: completes the gradients of parameters replicated over the
// domain dimension.
//
// Every domain rank runs the same replicated weights on its own part of the field, and
// the loss is a sum over all parts (lat_weighted_mse normalises by the *global* element
// count). The gradient of a sum is the sum of the gradients, so each rank's backward
// leaves a partial gradient and the complete one is their SUM over the domain
// communicator, not their average. (Averaging would be right only if every rank had
// computed the gradient of the whole loss, as data-parallel replicas do.)
//
// Parameters whose placement shards them over the domain dim (placement.domain is
// Shard) are left alone: their gradient is already their own. Gradients are packed into
// one buffer per dtype, so the cost is one all-reduce per dtype, whatever the number of
// parameters; nothing is sent on a domain of size 1. Call once per step, after the
// backward passes (gradient accumulation over micro-batches may happen before: the sum
// is linear).
//
// `reduce_dtype`: f32 (default) sums every gradient in its own dtype; bf16 rounds f32
// gradients to bf16 for the all-reduce and widens the sum back (half the bytes;
// comm/flat_buckets.hpp). A reduce dtype other than f32/bf16, or an f64 gradient with
// bf16, is an InvalidArgument naming it, on every rank alike.

#include "tessera/comm.hpp"
#include "tessera/nn/module.hpp"

namespace tessera {
class Mesh;
}

namespace tessera::domain {

// Returns the number of parameters whose gradients were summed.
int sync_domain_gradients(nn::Module& module, const Mesh& mesh, DType reduce_dtype = DType::f32);
int sync_domain_gradients(nn::Module& module, Communicator& domain_comm, DType reduce_dtype = DType::f32);

}  // namespace tessera::domain
