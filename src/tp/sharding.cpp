#include "tessera/tp/sharding.hpp"

#include "tessera/tp/mappings.hpp"

namespace tessera::tp {

Parameter make_tp_sharded(const std::string& layer, const std::string& parameter, const Shape& global_shape,
                          int dim, const Communicator& tp, DType dtype, Device device, const InitSpec& init) {
  if (dim < 0 || dim >= static_cast<int>(global_shape.size())) {
    throw InternalError(layer + ": shard dim " + std::to_string(dim) + " outside " + shape_str(global_shape));
  }
  const std::int64_t extent = global_shape[dim];
  // Uneven extents follow the partition rule (the first extent % tp ranks hold one more
  // row); an extent below the tp size would leave a rank with an empty shard, which no
  // layer needs and every kernel would have to special-case.
  if (extent < tp.size()) {
    throw ShapeError(layer + ": " + parameter + " of shape " + shape_str(global_shape) + " cannot be sharded over tp: dim " +
                     std::to_string(dim) + " (extent " + std::to_string(extent) +
                     ") is smaller than the tp size " + std::to_string(tp.size()) + ", which would leave a rank empty");
  }
  const ShardRange range = shard_range(extent, tp.size(), tp.rank());
  Shape local_shape = global_shape;
  local_shape[dim] = range.length;
  Shape offset(global_shape.size(), 0);
  offset[dim] = range.start;
  MeshPlacement placement;
  placement.tp = Placement::shard(dim);
  return Parameter(Tensor::zeros(local_shape, dtype, device), global_shape, placement, offset, init);
}

void load_shard_from_master(Parameter& p, const Tensor& master, const std::string& what) {
  if (master.shape() != p.global_shape || master.dtype() != p.value.dtype()) {
    throw ShapeError(what + ": master tensor " + master.str() + " does not match the parameter's global shape " +
                     shape_str(p.global_shape) + " and dtype " + std::string(dtype_name(p.value.dtype())));
  }
  Tensor block = master;
  for (int d = 0; d < p.value.dim(); ++d) block = block.narrow(d, p.local_offset[d], p.value.shape()[d]);
  p.value.copy_from(block);
}

Tensor assemble_master(const Parameter& p, const Tensor& local, Communicator& tp) {
  if (local.shape() != p.value.shape()) {
    throw ShapeError("assemble_master: local tensor " + local.str() + " is not shaped like the parameter's shard " +
                     p.value.str());
  }
  if (!p.placement.tp.is_shard()) return local.clone();
  if (tp.size() == 1) return local.clone();
  return gather_along(local, p.placement.tp.dim, tp, p.global_shape[p.placement.tp.dim]);
}

}  // namespace tessera::tp
