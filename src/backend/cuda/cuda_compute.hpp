#pragma once
// Private to src/backend/cuda: the CUDA implementation of the compute interface
// (backend/compute.hpp), declared once here as HostCompute is in host_compute.hpp. The
// definitions are grouped by family, one file each (the host twin of each family is the
// host_*.cpp file of the same name):
//
//   cuda_blas.cu        gemm, axpy, add_bias, accumulate_bias_grad, sum, dot, and the f32/f64
//                       GEMM and scale that attention and scale call (cuda_blas.hpp)
//   cuda_optim.cu       scale (bf16 here, f32/f64 through cuda_blas.hpp), sum_squares, cast,
//                       sgd_update, adamw_update
//   cuda_elementwise.cu activation(+backward), swiglu(+backward)
//   cuda_norm.cu        layer_norm, rms_norm (+backward)
//   cuda_softmax.cu     row_max, sum_exp_and_target, cross_entropy_grad
//   cuda_attention.cu   attention (+backward): cuBLAS GEMMs per head and softmax row kernels
//   cuda_rope.cu        rope (rotary position embeddings, forward and inverse)
//   cuda_embedding.cu   embedding_gather, embedding_scatter_add, embedding_norm_partials,
//                       embedding_renorm_rows
//   cuda_field.cu       weighted_squared_error, channel_affine
//   cuda_im2col.cu      im2col, col2im_add
//   cuda_init.cu        init_uniform
//   cuda_halo.cu        halo_pack, halo_unpack, halo_zero
//   cuda_compute.cu     the singleton, pinned staging memory, stream and pointer queries
//
// Every kernel computes what its host twin computes: values in double, rounded once to
// the tensor's dtype; row statistics and reductions in double with a fixed combination
// order (deterministic for a given shape). The one exception is the embedding
// scatter-add, which uses atomicAdd (the order of additions into a shared row varies
// from run to run, as in every GPU framework). No vendor header here: the kernel files
// include cuda_runtime.hpp themselves.

#include <cstddef>
#include <cstdint>

#include "backend/compute.hpp"

namespace tessera::detail {

class CudaCompute final : public Compute {
 public:
  // Every operation of compute_operations.def, defined in the files listed above.
#define TESSERA_COMPUTE_OPERATION(result, name, parameters) result name parameters override;
#include "backend/compute_operations.def"
};

}  // namespace tessera::detail
