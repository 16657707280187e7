#include "tessera/parameter.hpp"

namespace tessera {

Parameter::Parameter(Tensor v, InitSpec init_spec)
    : Parameter(v, v.shape(), MeshPlacement{}, Shape(v.shape().size(), 0), init_spec) {}

Parameter::Parameter(Tensor local_value, Shape global, MeshPlacement p, Shape offset, InitSpec init_spec)
    : value(std::move(local_value)),
      global_shape(std::move(global)),
      placement(p),
      local_offset(std::move(offset)),
      init(init_spec) {
  if (!value.defined()) throw InvalidArgument("Parameter: the value tensor is undefined");
  if (static_cast<int>(global_shape.size()) != value.dim()) {
    throw ShapeError("Parameter: local value " + value.str() + " and global shape " +
                     shape_str(global_shape) + " differ in rank");
  }
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    const Placement& pl = placement[d];
    if (pl.is_shard() && (pl.dim < 0 || pl.dim >= value.dim())) {
      throw ShapeError("Parameter: placement " + std::string(mesh_dim_name(d)) + ": " + pl.str() +
                       " names a dim outside global shape " + shape_str(global_shape));
    }
  }
  if (local_offset.size() != global_shape.size()) {
    throw ShapeError("Parameter: local offset " + shape_str(local_offset) + " does not match global shape " +
                     shape_str(global_shape));
  }
  for (std::size_t d = 0; d < global_shape.size(); ++d) {
    if (local_offset[d] < 0 || local_offset[d] + value.shape()[d] > global_shape[d]) {
      throw ShapeError("Parameter: local block " + value.str() + " at offset " + shape_str(local_offset) +
                       " lies outside global shape " + shape_str(global_shape));
    }
  }
  grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
}

void Parameter::zero_grad() {
  if (grad.defined()) grad.fill_zero();
}

}  // namespace tessera
