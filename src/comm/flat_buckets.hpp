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

#include <cstddef>
#include <functional>
#include <vector>

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

}  // namespace tessera::detail
