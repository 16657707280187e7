#pragma once
// Private: the one all-gather of tensors split by the partition rule (shard_range) along a
// dim, uneven blocks included, in a single collective. Each rank's block of each tensor
// travels padded to that tensor's widest block (rank 0's, which is never the narrower),
// the tensors one after another in one flat buffer, so every rank sends the same count.
// tp::gather_along gathers one tensor this way; fsdp2 (src/dp/engine.cpp) every sharded
// parameter of a unit at once, along dim 0 over the dp group. Implemented in mappings.cpp,
// beside gather_along.

#include <cstdint>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"

namespace tessera::tp::detail {

// Every rank's block of `extent` elements under the partition rule.
std::vector<ShardRange> partition_blocks(std::int64_t extent, int parts);

// One tensor of a gather: this rank's block, the dim it is split along (0 <= dim <
// local.dim()), and every rank's block of that dim (this rank's is local's extent).
struct BlockGather {
  Tensor local;
  int dim = 0;
  std::vector<ShardRange> blocks;
};

// The whole tensors, in the order of `parts`; all share one dtype and device. A group of
// size 1 gets its blocks back as they are.
std::vector<Tensor> all_gather_blocks(const std::vector<BlockGather>& parts, Communicator& group);

}  // namespace tessera::tp::detail
