#include "tessera/tp/mappings.hpp"

#include "tessera/placement.hpp"

namespace tessera::tp {

namespace {

int normalize_dim(const Tensor& x, int dim, const char* op) {
  const int d = dim < 0 ? x.dim() + dim : dim;
  if (d < 0 || d >= x.dim()) {
    throw InvalidArgument(std::string("tp::") + op + ": dim " + std::to_string(dim) + " out of range for " + x.str());
  }
  return d;
}

std::int64_t block_extent(const Tensor& x, int d, int parts, const char* op) {
  if (x.shape()[d] % parts != 0) {
    throw ShapeError(std::string("tp::") + op + ": dim " + std::to_string(d) + " of " + x.str() + " (extent " +
                     std::to_string(x.shape()[d]) + ") does not divide by the tp group size " +
                     std::to_string(parts));
  }
  return x.shape()[d] / parts;
}

}  // namespace

Tensor split_along(const Tensor& x, int dim, const Communicator& group) {
  const int d = normalize_dim(x, dim, "split_along");
  if (group.size() == 1) return x;
  (void)block_extent(x, d, group.size(), "split_along");  // even split required (gather needs it)
  const ShardRange range = shard_range(x.shape()[d], group.size(), group.rank());
  return x.narrow(d, range.start, range.length).contiguous();
}

Tensor gather_along(const Tensor& x, int dim, Communicator& group) {
  const int d = normalize_dim(x, dim, "gather_along");
  const int p = group.size();
  if (p == 1) return x;
  const Tensor local = x.contiguous();
  // all_gather yields rank-major blocks; place block r at [r*extent, (r+1)*extent) of d.
  Shape stacked_shape = local.shape();
  stacked_shape.insert(stacked_shape.begin(), p);
  Tensor stacked = Tensor::empty(stacked_shape, local.dtype(), local.device());
  group.all_gather(local, stacked);
  Shape out_shape = local.shape();
  out_shape[d] *= p;
  if (d == 0) return stacked.reshape(out_shape);  // rank-major blocks are already in place
  Tensor out = Tensor::empty(out_shape, local.dtype(), local.device());
  const std::int64_t extent = local.shape()[d];
  for (int r = 0; r < p; ++r) {
    out.narrow(d, r * extent, extent).copy_from(stacked.narrow(0, r, 1).reshape(local.shape()));
  }
  return out;
}

Tensor reduce_scatter_along(const Tensor& x, int dim, Communicator& group) {
  const int d = normalize_dim(x, dim, "reduce_scatter_along");
  const int p = group.size();
  if (p == 1) return x;
  const std::int64_t block = block_extent(x, d, p, "reduce_scatter_along");
  Shape block_shape = x.shape();
  block_shape[d] = block;
  // reduce_scatter wants rank-major blocks: pack block r of dim d into slot r.
  Tensor packed;
  if (d == 0) {
    packed = x.contiguous();
  } else {
    Shape packed_shape = block_shape;
    packed_shape.insert(packed_shape.begin(), p);
    packed = Tensor::empty(packed_shape, x.dtype(), x.device());
    for (int r = 0; r < p; ++r) {
      packed.narrow(0, r, 1).reshape(block_shape).copy_from(x.narrow(d, r * block, block));
    }
  }
  Tensor out = Tensor::empty(block_shape, x.dtype(), x.device());
  group.reduce_scatter(packed, out, ReduceOp::sum);
  return out;
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
Tensor scatter_to_parallel_backward(const Tensor& grad, int dim, Communicator& group) {
  return gather_along(grad, dim, group);
}
Tensor gather_from_parallel(const Tensor& x, int dim, Communicator& group) { return gather_along(x, dim, group); }
Tensor gather_from_parallel_backward(const Tensor& grad, int dim, Communicator& group) {
  return split_along(grad, dim, group);
}
Tensor sequence_all_gather(const Tensor& x, int dim, Communicator& group) { return gather_along(x, dim, group); }
Tensor sequence_all_gather_backward(const Tensor& grad, int dim, Communicator& group) {
  return reduce_scatter_along(grad, dim, group);
}
Tensor sequence_reduce_scatter(const Tensor& x, int dim, Communicator& group) {
  return reduce_scatter_along(x, dim, group);
}
Tensor sequence_reduce_scatter_backward(const Tensor& grad, int dim, Communicator& group) {
  return gather_along(grad, dim, group);
}

Mapping::Mapping(Kind kind, Communicator& group, int dim, ReduceOp op)
    : kind_(kind), group_(group), dim_(dim), op_(op) {}

Tensor Mapping::forward(const Tensor& x) {
  switch (kind_) {
    case Kind::copy: return copy_to_parallel(x, group_);
    case Kind::reduce: return reduce_from_parallel(x, group_, op_);
    case Kind::scatter: return scatter_to_parallel(x, dim_, group_);
    case Kind::gather: return gather_from_parallel(x, dim_, group_);
    case Kind::sequence_all_gather: return sequence_all_gather(x, dim_, group_);
    case Kind::sequence_reduce_scatter: return sequence_reduce_scatter(x, dim_, group_);
  }
  throw InternalError("Mapping::forward: unknown kind");
}

Tensor Mapping::backward(const Tensor& grad) {
  switch (kind_) {
    case Kind::copy: return copy_to_parallel_backward(grad, group_, op_);
    case Kind::reduce: return reduce_from_parallel_backward(grad, group_);
    case Kind::scatter: return scatter_to_parallel_backward(grad, dim_, group_);
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
