#pragma once
// The one bucketed flatten-and-collective of tessera. Gradient syncs (tp's replicated
// gradients, the domain's replicated gradients, ddp) and dp's parameter broadcast all
// do the same thing: group many small tensors by dtype and device, pack each group into
// flat buffers of at most `bucket_bytes`, run one collective per buffer and copy back.
// Small messages cost latency, not bandwidth, so fewer larger collectives win; the
// bound keeps the extra memory (one buffer per bucket) in check.
//
// Every rank must pass the same list in the same order: the buckets, and so the
// collectives, then pair up across ranks without any metadata exchange.
//
// Reduce dtype: a gradient reduction may travel narrower than its gradients are stored.
// With reduce dtype bf16, an f32 buffer is rounded to a bf16 wire buffer (nearest even),
// the collective sums the bf16 values (MPI: every partial sum widened to f32 and rounded
// back, comm/mpi_types.cpp; NCCL: ncclBfloat16), and the result is widened back into the
// f32 buffer, where an average is scaled by 1/ranks — in f32, so the average adds no
// bf16 rounding of its own. Half the bytes on the wire; the result carries bf16's 8
// significant bits. With reduce dtype f32 every buffer travels in its own dtype (f32 or
// f64) and nothing is copied: the reduction of before, bit for bit. ddp's buckets,
// fsdp2's reduce-scatters and the bucketed all-reduces below all go through
// wire_buffer / pack_wire / wire_op / unpack_wire.

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/device.hpp"
#include "tessera/dtype.hpp"
#include "tessera/tensor.hpp"

namespace tessera::detail {

// What decides an item's bucket: items share one only with equal dtype, device and
// `kind` (the caller's extra key, e.g. which reduction the bucket needs).
struct BucketItem {
  DType dtype = DType::f32;
  Device device = Device::host();
  int kind = 0;
  std::size_t bytes = 0;
};

// Indices of `items`, bucket by bucket, in the order the buckets were opened; within a
// bucket in the order given. A bucket takes items until the next would take it past
// `bucket_bytes`; an item larger than that gets a bucket of its own.
std::vector<std::vector<int>> plan_buckets(const std::vector<BucketItem>& items, std::size_t bucket_bytes);

// One contiguous 1-D tensor holding `tensors` (one dtype and device, any strides) back
// to back, and the copy of its consecutive pieces back into them.
Tensor flatten(const std::vector<Tensor>& tensors);
void unflatten(const Tensor& flat, const std::vector<Tensor>& tensors);

// Runs `collective(flat, kind)` in place on each bucket of `tensors` (kinds[i] is
// tensors[i]'s kind; empty: all 0) and copies the results back into the tensors.
// Empty tensors take no part.
void bucketed_in_place(const std::vector<Tensor>& tensors, const std::vector<int>& kinds, std::size_t bucket_bytes,
                       const std::function<void(Tensor& flat, int kind)>& collective);

// ---- Reduce dtype

// InvalidArgument naming `who` unless `reduce` is f32 or bf16.
void check_reduce_dtype(DType reduce, std::string_view who);
// InvalidArgument naming `who` and the parameter `name` when its gradient `grad` cannot be
// reduced in `reduce`: bf16 reduces f32 (and bf16) gradients only — an f64 gradient would
// lose 45 of its 53 bits.
void check_reducible(const Tensor& grad, DType reduce, std::string_view who, std::string_view name);

// The buffer a reduction of the contiguous `flat` travels in: `flat` itself unless
// `reduce` narrows its dtype (bf16 for an f32 buffer), else a new buffer of that dtype.
Tensor wire_buffer(const Tensor& flat, DType reduce);
// `flat` rounded into `wire` (from wire_buffer(flat, ...)); nothing when they are one.
void pack_wire(const Tensor& flat, Tensor& wire);
// The op the wire runs: an average of a narrowed buffer travels as a sum (unpack_wire
// averages after widening).
ReduceOp wire_op(ReduceOp op, const Tensor& flat, const Tensor& wire);
// The reduced `wire` widened back into `flat`, and the average of a narrowed `op` taken
// there (scaled by 1/ranks in flat's dtype); nothing when they are one.
void unpack_wire(const Tensor& wire, Tensor& flat, ReduceOp op, int ranks);

// bucketed_in_place for reductions: each bucket all-reduced over `comm` (ops[i] is
// tensors[i]'s op; items share a bucket only with equal ops) in reduce dtype `reduce`.
// Blocking; callers check their gradients with check_reducible first.
void bucketed_all_reduce(Communicator& comm, const std::vector<Tensor>& tensors, const std::vector<ReduceOp>& ops,
                         std::size_t bucket_bytes, DType reduce);

}  // namespace tessera::detail
