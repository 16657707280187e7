#include "tessera/tp/mappings.hpp"

#include <vector>

#include "tessera/placement.hpp"
#include "tp/block_gather.hpp"

namespace tessera::tp {

// ---- The padded all-gather of uneven blocks (block_gather.hpp), one for tp and fsdp2.
namespace detail {

std::vector<ShardRange> partition_blocks(std::int64_t extent, int parts) {
  std::vector<ShardRange> blocks(parts);
  for (int r = 0; r < parts; ++r) blocks[r] = shard_range(extent, parts, r);
  return blocks;
}

namespace {
// A part's block as it travels: its own extent along dim widened to the widest block.
Shape padded_shape(const BlockGather& part) {
  Shape shape = part.local.shape();
  shape[part.dim] = part.blocks.front().length;
  return shape;
}
}  // namespace

std::vector<Tensor> all_gather_blocks(const std::vector<BlockGather>& parts, Communicator& group) {
  const int p = group.size();
  std::vector<Tensor> whole;
  if (p == 1) {
    for (const BlockGather& part : parts) whole.push_back(part.local);
    return whole;
  }
  if (parts.empty()) return whole;
  // Each rank's slot: the parts' padded blocks one after another.
  std::vector<std::int64_t> offsets;
  std::int64_t slot = 0;
  for (const BlockGather& part : parts) {
    offsets.push_back(slot);
    slot += shape_numel(padded_shape(part));
  }
  const Tensor& first = parts.front().local;
  const bool single_widest =
      parts.size() == 1 && first.shape()[parts[0].dim] == parts[0].blocks.front().length;
  Tensor send;
  if (single_widest) {
    send = first.contiguous().reshape({slot});  // nothing to pad or pack
  } else {
    send = Tensor::zeros({slot}, first.dtype(), first.device());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const BlockGather& part = parts[i];
      const Shape padded = padded_shape(part);
      send.narrow(0, offsets[i], shape_numel(padded))
          .reshape(padded)
          .narrow(part.dim, 0, part.local.shape()[part.dim])
          .copy_from(part.local);
    }
  }
  Tensor recv = Tensor::empty({slot * p}, first.dtype(), first.device());
  group.all_gather(send, recv);  // rank-major slots
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const BlockGather& part = parts[i];
    const Shape padded = padded_shape(part);
    Shape shape = part.local.shape();
    shape[part.dim] = part.blocks.back().end();
    const bool even = part.blocks.front().length * p == shape[part.dim];
    if (parts.size() == 1 && even && part.dim == 0) {
      whole.push_back(recv.reshape(shape));  // rank-major blocks of dim 0 are already in place
      continue;
    }
    Tensor out = Tensor::empty(shape, first.dtype(), first.device());
    for (int r = 0; r < p; ++r) {
      out.narrow(part.dim, part.blocks[r].start, part.blocks[r].length)
          .copy_from(recv.narrow(0, r * slot + offsets[i], shape_numel(padded))
                         .reshape(padded)
                         .narrow(part.dim, 0, part.blocks[r].length));
    }
    whole.push_back(std::move(out));
  }
  return whole;
}

}  // namespace detail

namespace {

int normalize_dim(const Tensor& x, int dim, const char* op) {
  const int d = dim < 0 ? x.dim() + dim : dim;
  if (d < 0 || d >= x.dim()) {
    throw InvalidArgument(std::string("tp::") + op + ": dim " + std::to_string(dim) + " out of range for " + x.str());
  }
  return d;
}

std::string extents_str(const std::vector<std::int64_t>& extents) {
  std::string s;
  for (std::size_t r = 0; r < extents.size(); ++r) s += (r ? ", " : "") + std::to_string(extents[r]);
  return s;
}

// The blocks of a gather whose caller does not know the global extent (GatherExtent::exchanged()):
// the ranks' extents along `d` are exchanged (one integer each, a collective of its own) and must
// be the partition rule's blocks of their sum. Every rank sees the same extents, so a
// layout that breaks the rule is refused on every rank alike.
std::vector<ShardRange> exchanged_blocks(const Tensor& local, int d, Communicator& group) {
  const int p = group.size();
  Tensor mine = Tensor::from_vector<std::int64_t>({local.shape()[d]}, {1});
  Tensor all = Tensor::empty({p}, DType::i64, Device::host());
  group.all_gather(mine, all);
  const std::vector<std::int64_t> extents = all.to_vector<std::int64_t>();
  std::int64_t total = 0;
  for (const std::int64_t e : extents) total += e;
  std::vector<ShardRange> blocks = detail::partition_blocks(total, p);
  for (int r = 0; r < p; ++r) {
    if (blocks[r].length != extents[r]) {
      throw ShapeError("tp::gather_along: the blocks along dim " + std::to_string(d) + " (extents " +
                       extents_str(extents) + " on ranks 0.." + std::to_string(p - 1) +
                       ") are not the partition rule's blocks of " + std::to_string(total) +
                       " (the first " + std::to_string(total) + " % " + std::to_string(p) +
                       " ranks hold one more)");
    }
  }
  return blocks;
}

}  // namespace

// Uneven blocks (the extent does not divide by the group size) travel padded to the
// widest block, ceil(extent / size), so a gather or reduce-scatter stays one collective
// of equal blocks; an even extent takes exactly the unpadded path it always took.

Tensor split_along(const Tensor& x, int dim, const Communicator& group) {
  const int d = normalize_dim(x, dim, "split_along");
  if (group.size() == 1) return x;
  const ShardRange range = shard_range(x.shape()[d], group.size(), group.rank());
  return x.narrow(d, range.start, range.length).contiguous();
}

Tensor gather_along(const Tensor& x, int dim, Communicator& group, GatherExtent extent) {
  const int d = normalize_dim(x, dim, "gather_along");
  const int p = group.size();
  if (extent.kind() == GatherExtent::Kind::known &&
      shard_range(extent.global(), p, group.rank()).length != x.shape()[d]) {
    throw ShapeError("tp::gather_along: " + x.str() + " on rank " + std::to_string(group.rank()) + " of " +
                     std::to_string(p) + " is not its block along dim " + std::to_string(d) + " of extent " +
                     std::to_string(extent.global()) + " (the partition rule gives it " +
                     std::to_string(shard_range(extent.global(), p, group.rank()).length) + ")");
  }
  if (p == 1) return x;
  const Tensor local = x.contiguous();
  std::vector<ShardRange> blocks;
  switch (extent.kind()) {
    case GatherExtent::Kind::even: blocks = detail::partition_blocks(local.shape()[d] * p, p); break;
    case GatherExtent::Kind::known: blocks = detail::partition_blocks(extent.global(), p); break;
    case GatherExtent::Kind::exchanged: blocks = exchanged_blocks(local, d, group); break;
  }
  return detail::all_gather_blocks({{local, d, std::move(blocks)}}, group).front();
}

Tensor reduce_scatter_along(const Tensor& x, int dim, Communicator& group) {
  const int d = normalize_dim(x, dim, "reduce_scatter_along");
  const int p = group.size();
  if (p == 1) return x;
  const std::vector<ShardRange> blocks = detail::partition_blocks(x.shape()[d], p);
  const std::int64_t widest = blocks.front().length;
  const bool even = widest * p == x.shape()[d];
  Shape block_shape = x.shape();
  block_shape[d] = widest;
  // reduce_scatter wants rank-major blocks: pack block r of dim d into slot r (padded
  // with zeros, which add nothing, when the blocks are uneven).
  Tensor packed;
  if (even && d == 0) {
    packed = x.contiguous();
  } else {
    Shape packed_shape = block_shape;
    packed_shape.insert(packed_shape.begin(), p);
    packed = even ? Tensor::empty(packed_shape, x.dtype(), x.device())
                  : Tensor::zeros(packed_shape, x.dtype(), x.device());
    for (int r = 0; r < p; ++r) {
      packed.narrow(0, r, 1)
          .reshape(block_shape)
          .narrow(d, 0, blocks[r].length)
          .copy_from(x.narrow(d, blocks[r].start, blocks[r].length));
    }
  }
  Tensor out = Tensor::empty(block_shape, x.dtype(), x.device());
  group.reduce_scatter(packed, out, ReduceOp::sum);
  const std::int64_t mine = blocks[group.rank()].length;
  return mine == widest ? out : out.narrow(d, 0, mine).contiguous();
}

Tensor all_reduce_sum(const Tensor& x, Communicator& group) { return all_reduce_with(x, ReduceOp::sum, group); }

Tensor all_reduce_with(const Tensor& x, ReduceOp op, Communicator& group) {
  // Checked here too, so that a model refused at tp 2 is refused at tp 1 as well.
  if (op == ReduceOp::avg && !is_floating(x.dtype())) {
    throw InvalidArgument("tp::all_reduce_with: avg is defined for floating dtypes, not " + x.str());
  }
  if (group.size() == 1) return x;  // sum, avg, max and min of one value are that value
  Tensor out = x.clone();
  group.all_reduce(out, op);
  return out;
}

Tensor copy_to_parallel(const Tensor& x, Communicator&) { return x; }
Tensor copy_to_parallel_backward(const Tensor& grad, Communicator& group, ReduceOp op) {
  return all_reduce_with(grad, op, group);
}
Tensor reduce_from_parallel(const Tensor& x, Communicator& group, ReduceOp op) { return all_reduce_with(x, op, group); }
Tensor reduce_from_parallel_backward(const Tensor& grad, Communicator&) { return grad; }
Tensor scatter_to_parallel(const Tensor& x, int dim, Communicator& group) { return split_along(x, dim, group); }
Tensor scatter_to_parallel_backward(const Tensor& grad, int dim, Communicator& group, GatherExtent extent) {
  return gather_along(grad, dim, group, extent);
}
Tensor gather_from_parallel(const Tensor& x, int dim, Communicator& group, GatherExtent extent) {
  return gather_along(x, dim, group, extent);
}
Tensor gather_from_parallel_backward(const Tensor& grad, int dim, Communicator& group) {
  return split_along(grad, dim, group);
}
// Sequence parallelism keeps the sequence evenly split: its all-gather has no global
// extent to go by (the layers see only their shard), and exchanging the ranks' extents
// would add a collective to every column layer's forward. The calls that see the whole
// sequence refuse an uneven one, naming the dim; sequence_all_gather without an extent
// takes every rank's block to be as long as this one.
namespace {
void require_even_sequence(const Tensor& x, int dim, std::optional<std::int64_t> global_extent, int p,
                           const char* op) {
  const int d = normalize_dim(x, dim, op);
  const std::int64_t extent = global_extent.value_or(x.shape()[d]);
  if (extent % p != 0) {
    throw ShapeError(std::string("tp::") + op + ": dim " + std::to_string(d) + " of " + x.str() + " (extent " +
                     std::to_string(extent) + ") does not divide by the tp group size " + std::to_string(p) +
                     ": sequence parallelism splits the sequence evenly (uneven shards are supported for the "
                     "tensor-parallel dims, not for the sequence)");
  }
}
std::int64_t even_sequence_extent(const Tensor& x, int dim, std::optional<std::int64_t> global_extent, int p,
                                  const char* op) {
  if (global_extent) {
    require_even_sequence(x, dim, global_extent, p, op);
    return *global_extent;
  }
  return x.shape()[normalize_dim(x, dim, op)] * p;
}
}  // namespace

Tensor sequence_all_gather(const Tensor& x, int dim, Communicator& group, std::optional<std::int64_t> global_extent) {
  if (group.size() == 1) return x;
  return gather_along(x, dim, group, even_sequence_extent(x, dim, global_extent, group.size(), "sequence_all_gather"));
}
Tensor sequence_all_gather_backward(const Tensor& grad, int dim, Communicator& group) {
  if (group.size() == 1) return grad;
  require_even_sequence(grad, dim, std::nullopt, group.size(), "sequence_all_gather_backward");
  return reduce_scatter_along(grad, dim, group);
}
Tensor sequence_reduce_scatter(const Tensor& x, int dim, Communicator& group) {
  if (group.size() == 1) return x;
  require_even_sequence(x, dim, std::nullopt, group.size(), "sequence_reduce_scatter");
  return reduce_scatter_along(x, dim, group);
}
Tensor sequence_reduce_scatter_backward(const Tensor& grad, int dim, Communicator& group,
                                        std::optional<std::int64_t> global_extent) {
  if (group.size() == 1) return grad;
  return gather_along(grad, dim, group,
                      even_sequence_extent(grad, dim, global_extent, group.size(), "sequence_reduce_scatter_backward"));
}

Mapping::Mapping(Kind kind, Communicator& group, int dim, ReduceOp op)
    : kind_(kind), group_(group), dim_(dim), op_(op) {}

Tensor Mapping::forward(const Tensor& x) {
  switch (kind_) {
    case Kind::copy: return copy_to_parallel(x, group_);
    case Kind::reduce: return reduce_from_parallel(x, group_, op_);
    case Kind::scatter:
      // Remembered for backward: the gather of an uneven split needs the whole extent.
      scattered_extent_ = x.size(normalize_dim(x, dim_, "scatter_to_parallel"));
      return scatter_to_parallel(x, dim_, group_);
    case Kind::gather: return gather_from_parallel(x, dim_, group_, GatherExtent::exchanged());
    case Kind::sequence_all_gather: return sequence_all_gather(x, dim_, group_);
    case Kind::sequence_reduce_scatter: return sequence_reduce_scatter(x, dim_, group_);
  }
  throw InternalError("Mapping::forward: unknown kind");
}

Tensor Mapping::backward(const Tensor& grad) {
  switch (kind_) {
    case Kind::copy: return copy_to_parallel_backward(grad, group_, op_);
    case Kind::reduce: return reduce_from_parallel_backward(grad, group_);
    case Kind::scatter: return scatter_to_parallel_backward(grad, dim_, group_, scattered_extent_);
    case Kind::gather: return gather_from_parallel_backward(grad, dim_, group_);
    case Kind::sequence_all_gather: return sequence_all_gather_backward(grad, dim_, group_);
    case Kind::sequence_reduce_scatter: return sequence_reduce_scatter_backward(grad, dim_, group_);
  }
  throw InternalError("Mapping::backward: unknown kind");
}

std::string Mapping::type_name() const {
  switch (kind_) {
    case Kind::copy: return "CopyToParallel";
    case Kind::reduce: return "ReduceFromParallel";
    case Kind::scatter: return "ScatterToParallel";
    case Kind::gather: return "GatherFromParallel";
    case Kind::sequence_all_gather: return "SequenceAllGather";
    case Kind::sequence_reduce_scatter: return "SequenceReduceScatter";
  }
  return "Mapping";
}

}  // namespace tessera::tp
