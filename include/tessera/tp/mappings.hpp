#pragma once
// Tensor-parallel mapping primitives, each a pair of forward / backward operations over
// the tp group (Megatron-LM's and ml.models.parallel's mp_copy / mp_reduce / mp_scatter /
// mp_gather, plus the sequence-parallel pair):
//
//   copy            forward identity        backward all-reduce (op, sum by default)
//   reduce          forward all-reduce (op, sum by default)     backward identity
//   scatter(dim)    forward split           backward all-gather
//   gather(dim)     forward all-gather      backward split
//   sequence all-gather(dim)                forward all-gather      backward reduce-scatter
//   sequence reduce-scatter(dim)            forward reduce-scatter  backward all-gather
//
// Splits and gathers work along any dim and keep rank order (rank r owns the r-th
// block). The blocks follow tessera's one partition rule, shard_range (placement.hpp):
// an extent that does not divide by the group size leaves the first extent % size ranks
// one element more, so rank r of p holds [r*q + min(r, m), ...) with q = extent / p and
// m = extent % p. Uneven blocks travel padded to the widest one, so each gather and
// reduce-scatter stays a single collective; an even extent takes the unpadded path.
// A gather needs every rank's block, and a GatherExtent says how it learns them: the
// global extent where the caller knows it (every layer does; an integer converts),
// GatherExtent::exchanged() to have the ranks first exchange their extents (one small
// all_gather; a layout that is not the rule's is then a ShapeError on every rank), or,
// by default, nothing: the layout is taken to be even — every block as long as
// this rank's — which is what every even caller always passed, at no extra cost; uneven
// blocks gathered that way fail in the collective. A group of size 1 short-circuits: no
// copy, no communication.
//
// The sequence pairs are the exception: sequence parallelism splits the sequence evenly.
// Its all-gather runs in every column layer's forward with only the local shard in hand,
// and learning the others' extents would cost a collective each time; so the calls that
// see the whole sequence (the reduce-scatters, and the gathers given global_extent)
// refuse an extent that does not divide by the group size with a ShapeError naming the
// dim, and a sequence all-gather without one takes every block to be this rank's size.
//
// The same pairs are available as nn::Modules (for Sequential and parallelize plans)
// whose forward and backward are these functions.
//
// The `op` of copy and reduce is ml.models.parallel's: mp_copy(x, op) reduces the
// gradient with it, mp_reduce(x, op) reduces the input with it and passes the gradient
// through unchanged. That identity backward is the derivative of the sum only: with avg
// the derivative would be grad / size, with max / min it would go to the rank(s) holding
// the extreme. It is kept as specified, so a ported model trains as it did; use sum
// (the default) where the gradient must be exact.

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tensor.hpp"

namespace tessera::tp {

// What a gather knows of the extent it gathers (see above).
class GatherExtent {
 public:
  enum class Kind { even, known, exchanged };
  // Even blocks: every rank's as long as this rank's.
  GatherExtent() = default;
  // The gathered extent: this rank's block must be the partition rule's block of it.
  GatherExtent(std::int64_t global) : kind_(Kind::known), global_(global) {}  // NOLINT: an extent reads as one
  // Learnt from the ranks, which exchange their extents first.
  static GatherExtent exchanged() {
    GatherExtent e;
    e.kind_ = Kind::exchanged;
    return e;
  }
  Kind kind() const { return kind_; }
  std::int64_t global() const { return global_; }  // Kind::known only

 private:
  Kind kind_ = Kind::even;
  std::int64_t global_ = 0;
};

// This rank's block of `x` along `dim` (a contiguous copy; `x` itself for one rank).
Tensor split_along(const Tensor& x, int dim, const Communicator& group);
// The blocks of all ranks concatenated along `dim` in rank order (a ShapeError where this
// rank's block is not the rule's block of a known extent).
Tensor gather_along(const Tensor& x, int dim, Communicator& group, GatherExtent extent = {});
// Sums `x` over the group and returns this rank's block along `dim` (its shard_range).
Tensor reduce_scatter_along(const Tensor& x, int dim, Communicator& group);
// Sum over the group (a new tensor; `x` is not modified).
Tensor all_reduce_sum(const Tensor& x, Communicator& group);
// `op` over the group (a new tensor; `x` is not modified). avg needs a floating dtype.
Tensor all_reduce_with(const Tensor& x, ReduceOp op, Communicator& group);

// The paired primitives. `dim` may be negative (counted from the end).
Tensor copy_to_parallel(const Tensor& x, Communicator& group);                // identity
Tensor copy_to_parallel_backward(const Tensor& grad, Communicator& group,
                                 ReduceOp op = ReduceOp::sum);                 // all-reduce with op
Tensor reduce_from_parallel(const Tensor& x, Communicator& group,
                            ReduceOp op = ReduceOp::sum);                      // all-reduce with op
Tensor reduce_from_parallel_backward(const Tensor& grad, Communicator& group);  // identity, whatever the op
Tensor scatter_to_parallel(const Tensor& x, int dim, Communicator& group);    // split
Tensor scatter_to_parallel_backward(const Tensor& grad, int dim, Communicator& group,
                                    GatherExtent extent = {});                 // gather
Tensor gather_from_parallel(const Tensor& x, int dim, Communicator& group,
                            GatherExtent extent = {});                         // gather
Tensor gather_from_parallel_backward(const Tensor& grad, int dim, Communicator& group);  // split
Tensor sequence_all_gather(const Tensor& x, int dim, Communicator& group,
                           std::optional<std::int64_t> global_extent = std::nullopt);  // gather
Tensor sequence_all_gather_backward(const Tensor& grad, int dim, Communicator& group);  // reduce-scatter
Tensor sequence_reduce_scatter(const Tensor& x, int dim, Communicator& group);  // reduce-scatter
Tensor sequence_reduce_scatter_backward(const Tensor& grad, int dim, Communicator& group,
                                        std::optional<std::int64_t> global_extent = std::nullopt);  // gather

// The primitives as modules, for composition with serial layers. Uneven blocks work: a
// scatter remembers the extent it split for its backward gather, and a gather module
// exchanges the ranks' extents (GatherExtent::exchanged()).
class Mapping : public nn::Module {
 public:
  enum class Kind { copy, reduce, scatter, gather, sequence_all_gather, sequence_reduce_scatter };
  // `op` is the reduction of copy (backward) and reduce (forward); the other kinds ignore it.
  Mapping(Kind kind, Communicator& group, int dim = -1, ReduceOp op = ReduceOp::sum);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad) override;
  std::string type_name() const override;
  void visit_activations(nn::ActivationVisitor& v) override { v.count(scattered_extent_); }
  Kind kind() const { return kind_; }
  int dim() const { return dim_; }
  ReduceOp op() const { return op_; }

 private:
  Kind kind_;
  Communicator& group_;
  int dim_;
  ReduceOp op_;
  std::int64_t scattered_extent_ = 0;  // scatter: the extent of the last forward's input
};

}  // namespace tessera::tp
