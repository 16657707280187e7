#include "comm/flat_buckets.hpp"

#include <map>
#include <string>
#include <tuple>

#include "backend/compute.hpp"
#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

std::vector<std::vector<int>> plan_buckets(const std::vector<BucketItem>& items, std::size_t bucket_bytes) {
  using Key = std::tuple<DType, DeviceType, int, int>;
  std::map<Key, int> open;  // key -> its open bucket
  std::vector<std::vector<int>> buckets;
  std::vector<std::size_t> bytes;
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const BucketItem& item = items[i];
    const Key key{item.dtype, item.device.type, item.device.index, item.kind};
    auto it = open.find(key);
    if (it == open.end() || bytes[it->second] + item.bytes > bucket_bytes) {
      it = open.insert_or_assign(key, static_cast<int>(buckets.size())).first;
      buckets.emplace_back();
      bytes.push_back(0);
    }
    buckets[it->second].push_back(i);
    bytes[it->second] += item.bytes;
  }
  return buckets;
}

Tensor flatten(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw InternalError("flatten: no tensors");
  std::int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  Tensor flat = Tensor::empty({total}, tensors.front().dtype(), tensors.front().device());
  std::int64_t offset = 0;
  for (const Tensor& t : tensors) {
    flat.narrow(0, offset, t.numel()).reshape(t.shape()).copy_from(t);
    offset += t.numel();
  }
  return flat;
}

void unflatten(const Tensor& flat, const std::vector<Tensor>& tensors) {
  std::int64_t offset = 0;
  for (const Tensor& t : tensors) {
    Tensor target = t;  // a handle: copying into it writes the caller's storage
    target.copy_from(flat.narrow(0, offset, t.numel()).reshape(t.shape()));
    offset += t.numel();
  }
}

void bucketed_in_place(const std::vector<Tensor>& tensors, const std::vector<int>& kinds, std::size_t bucket_bytes,
                       const std::function<void(Tensor& flat, int kind)>& collective) {
  std::vector<BucketItem> items;
  std::vector<int> index;  // items -> tensors (empty tensors are left out)
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.numel() == 0) continue;
    items.push_back({t.dtype(), t.device(), kinds.empty() ? 0 : kinds[i], t.nbytes()});
    index.push_back(static_cast<int>(i));
  }
  for (const std::vector<int>& bucket : plan_buckets(items, bucket_bytes)) {
    std::vector<Tensor> members;
    for (int b : bucket) members.push_back(tensors[index[b]]);
    Tensor flat = flatten(members);
    collective(flat, items[bucket.front()].kind);
    unflatten(flat, members);
  }
}

void check_reduce_dtype(DType reduce, std::string_view who) {
  if (reduce != DType::f32 && reduce != DType::bf16) {
    throw InvalidArgument(std::string(who) + ": reduce dtype " + std::string(dtype_name(reduce)) +
                          " is not one of f32, bf16");
  }
}

void check_reducible(const Tensor& grad, DType reduce, std::string_view who, std::string_view name) {
  if (reduce == DType::bf16 && grad.dtype() != DType::f32 && grad.dtype() != DType::bf16) {
    throw InvalidArgument(std::string(who) + ": parameter " + std::string(name) + " has a " +
                          std::string(dtype_name(grad.dtype())) +
                          " gradient; reduce dtype bf16 reduces f32 gradients only (use reduce dtype f32)");
  }
}

namespace {
// Whether `reduce` makes a buffer of `stored` travel narrower.
bool narrows(DType stored, DType reduce) { return reduce == DType::bf16 && stored == DType::f32; }

// dst = src converted, both contiguous with one element count and device.
void cast_into(const Tensor& src, Tensor& dst) {
  if (src.numel() == 0) return;
  compute_for(src, "reduce dtype cast").cast(src.dtype(), src.data(), dst.dtype(), dst.data(), src.numel(),
                                             src.device().index);
}
}  // namespace

Tensor wire_buffer(const Tensor& flat, DType reduce) {
  if (!narrows(flat.dtype(), reduce)) return flat;
  return Tensor::empty(flat.shape(), reduce, flat.device());
}

void pack_wire(const Tensor& flat, Tensor& wire) {
  if (wire.dtype() != flat.dtype()) cast_into(flat, wire);
}

ReduceOp wire_op(ReduceOp op, const Tensor& flat, const Tensor& wire) {
  return op == ReduceOp::avg && wire.dtype() != flat.dtype() ? ReduceOp::sum : op;
}

void unpack_wire(const Tensor& wire, Tensor& flat, ReduceOp op, int ranks) {
  if (wire.dtype() == flat.dtype()) return;
  cast_into(wire, flat);
  if (op == ReduceOp::avg) ops::scale(flat, 1.0 / ranks);
}

void bucketed_all_reduce(Communicator& comm, const std::vector<Tensor>& tensors, const std::vector<ReduceOp>& ops,
                         std::size_t bucket_bytes, DType reduce) {
  std::vector<int> kinds;
  for (ReduceOp op : ops) kinds.push_back(static_cast<int>(op));
  bucketed_in_place(tensors, kinds, bucket_bytes, [&](Tensor& flat, int kind) {
    const auto op = static_cast<ReduceOp>(kind);
    Tensor wire = wire_buffer(flat, reduce);
    pack_wire(flat, wire);
    comm.all_reduce(wire, wire_op(op, flat, wire));
    unpack_wire(wire, flat, op, comm.size());
  });
}

}  // namespace tessera::detail
