#pragma once
// Cross-entropy over logits whose vocabulary dim is sharded over the tp group
// (Megatron-LM's vocab-parallel cross-entropy): no rank ever holds the full logits row.
//
// Rank r holds a contiguous block of the vocabulary columns, in rank order, of any width
// >= 1: the partition rule's blocks (shard_range: the first V % tp ranks hold one column
// more, as a ColumnParallelLinear head gives them) or even ones. The widths travel with
// the first all-reduce, so V need not divide by tp and costs nothing extra. The loss is computed in fp32 or better
// (f64 logits stay f64) with the max-subtraction trick: a MAX all-reduce of row maxima,
// then one SUM all-reduce of (sum of exp, target logit) per row. The mean is taken over
// rows whose target is not `ignore_index`; ignored rows contribute neither loss nor
// gradient. With a group of size 1 this is the ordinary (serial) cross-entropy.

#include <cstdint>

#include "tessera/comm.hpp"
#include "tessera/tensor.hpp"

namespace tessera::tp {

struct CrossEntropyResult {
  double loss = 0.0;            // mean over counted rows (0 when none is counted)
  std::int64_t counted = 0;     // rows whose target is not ignore_index
  Tensor grad_logits;           // d loss / d local logits, shaped like the local logits
};

// logits_local [N, V_local] (f32 or f64), targets [N] (i64, global vocabulary ids in
// [0, V) or ignore_index). A target outside [0, V) that is not ignore_index is an
// InvalidArgument naming the row and the id (detected on every rank alike).
CrossEntropyResult vocab_parallel_cross_entropy(const Tensor& logits_local, const Tensor& targets,
                                                Communicator& tp, std::int64_t ignore_index = -100);

}  // namespace tessera::tp
