#include "comm/flat_buckets.hpp"

#include <map>
#include <tuple>

#include "tessera/error.hpp"

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

}  // namespace tessera::detail
