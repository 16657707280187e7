#pragma once
// Private: the host implementation of the compute interface (backend/compute.hpp).
// GEMM goes through CBLAS; everything else is plain loops, accumulating in double. The
// definitions are grouped by family, one file each:
//
//   host_blas.cpp        gemm, axpy, scale, add_bias, accumulate_bias_grad, sum, dot, sum_squares
//   host_elementwise.cpp activation(+backward), swiglu(+backward), cast
//   host_norm.cpp        layer_norm, rms_norm (+backward)
//   host_softmax.cpp     row_max, sum_exp_and_target, cross_entropy_grad
//   host_attention.cpp   attention (+backward), fused per head, double accumulation
//   host_rope.cpp        rope (rotary position embeddings, forward and inverse)
//   host_embedding.cpp   embedding_gather, embedding_scatter_add, embedding_norm_partials,
//                        embedding_renorm_rows
//   host_field.cpp       weighted_squared_error, channel_affine (field losses, normalisation)
//   host_im2col.cpp      im2col, col2im_add
//   host_init.cpp        init_uniform
//   host_halo.cpp        halo_pack, halo_unpack, halo_zero
//   host_optim.cpp       sgd_update, adamw_update
//   host_compute.cpp     the singleton, staging memory and the no-op stream entries

#include "backend/compute.hpp"

namespace tessera::detail {

class HostCompute final : public Compute {
 public:
  // Every operation of compute_operations.def, defined in the files listed above.
#define TESSERA_COMPUTE_OPERATION(result, name, parameters) result name parameters override;
#include "backend/compute_operations.def"
};

HostCompute& host_compute();

// Frees the host backend's cached large blocks (host_backend.cpp).
void release_host_cached_blocks() noexcept;

// Calls f(T{}) with T = float or double after `dtype` (the front ends checked that it is
// one of the two).
template <class F>
void for_float(DType dtype, F&& f) {
  if (dtype == DType::f32) {
    f(float{});
  } else {
    f(double{});
  }
}

}  // namespace tessera::detail
