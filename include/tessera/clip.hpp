#pragma once
// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_, L2 norm) over
// parameters that may be sharded or replicated across the mesh.
//
// The global norm is the norm of the *master* gradients: a shard counts once, and a
// parameter replicated over some mesh dimensions counts once however many ranks hold a
// copy. Each rank adds sum(grad^2) / r, r = the product of the sizes of the mesh
// dimensions over which the parameter is Replicate, and one f64 all-reduce (sum) over
// mesh.world() gives the exact squared norm on every rank. That assumes the copies are
// identical: call it after the gradients of replicated parameters are synchronised
// (sync_replicated_gradients, data-parallel all-reduce), before Optimizer::step().
//
// When norm > max_norm (precisely, as PyTorch: when max_norm / (norm + 1e-6) < 1) every
// gradient is scaled by max_norm / (norm + 1e-6). The pre-clip norm is returned. A
// non-finite norm (inf or NaN gradients) is returned as is and the gradients are left
// untouched, so the caller can detect it and skip the step; PyTorch's default would
// instead scale them by 0 or NaN.
//
// Frozen parameters (Parameter::trainable false) are neither counted nor scaled; their
// gradient may be undefined.
//
// Host gradients of f32, f64 or bf16. The mesh overloads are collective over
// mesh.world(): every rank calls them with its own shards of the same parameter list,
// and a bad argument on any rank throws the same error on every rank.

#include <string>
#include <utility>
#include <vector>

#include "tessera/mesh.hpp"
#include "tessera/parameter.hpp"

namespace tessera {

// The global L2 norm of the gradients, counting replicated copies once (collective).
double global_grad_norm(const std::vector<std::pair<std::string, Parameter*>>& params, const Mesh& mesh);
// Clips to max_norm (>= 0) and returns the pre-clip global norm (collective).
double clip_grad_norm(const std::vector<std::pair<std::string, Parameter*>>& params, double max_norm,
                      const Mesh& mesh);

// Serial forms: every parameter must hold its whole master tensor (local shape ==
// global shape); a shard is an InvalidArgument naming it (use the Mesh overloads).
double global_grad_norm(const std::vector<std::pair<std::string, Parameter*>>& params);
double clip_grad_norm(const std::vector<std::pair<std::string, Parameter*>>& params, double max_norm);

}  // namespace tessera
