#pragma once
// Parameter: a trainable tensor that knows its master (global) shape and how it is
// placed over the mesh. `value` and `grad` hold this rank's local shard.

#include <string>

#include "tessera/init_spec.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

struct Parameter {
  Tensor value;             // local shard
  Tensor grad;              // same shape, dtype and device as value; accumulated by backward()
  Shape global_shape;       // the master weight's shape
  MeshPlacement placement;  // Replicate everywhere unless a parallel layer shards it
  Shape local_offset;       // where the local shard starts in the master tensor (per dim)
  InitSpec init;            // how initialize_parameters() fills it (set by the layer)
  // Set by sequence parallelism: each tp rank's gradient is a partial sum over its
  // sequence shard, so sync_replicated_gradients sums it over tp instead of averaging.
  bool partial_grad_over_tp = false;
  // false: frozen (PyTorch's requires_grad = False), e.g. a base weight under LoRA
  // (tp/lora.hpp). Optimizers and gradient clipping skip a frozen parameter; whoever
  // freezes it may release its grad (leave it undefined) so that layers skip computing
  // it. Checkpoints still save and load it like any other parameter.
  bool trainable = true;

  Parameter() = default;
  // A replicated parameter (global shape = local shape, offset 0) with a zeroed gradient.
  explicit Parameter(Tensor value, InitSpec init = {});
  // A (possibly sharded) parameter with a zeroed gradient: `local_value` is the block of
  // the master tensor starting at `local_offset`. Checks that sharded dims exist and
  // that the block lies inside `global_shape`.
  Parameter(Tensor local_value, Shape global_shape, MeshPlacement placement, Shape local_offset,
            InitSpec init = {});

  void zero_grad();
  bool is_sharded() const { return !placement.is_replicated(); }
};

}  // namespace tessera
