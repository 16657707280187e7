#pragma once
// Private to src/backend/cuda: the CUDA implementation of the compute interface
// (backend/compute.hpp), declared once here as HostCompute is in host_compute.hpp. The
// definitions are grouped by family, one file each (the host twin of each family is the
// host_*.cpp file of the same name):
//
//   cuda_blas.cu        gemm, axpy, scale (f32/f64), add_bias, accumulate_bias_grad, sum, dot
//                       (free functions of cuda_blas.hpp, forwarded below)
//   cuda_optim.cu       sum_squares, scale (bf16), cast, sgd_update, adamw_update
//   cuda_elementwise.cu activation(+backward), swiglu(+backward)
//   cuda_norm.cu        layer_norm, rms_norm (+backward)
//   cuda_softmax.cu     row_max, sum_exp_and_target, cross_entropy_grad
//   cuda_attention.cu   attention (+backward): cuBLAS GEMMs per head and softmax row kernels
//   cuda_rope.cu        rope (rotary position embeddings, forward and inverse)
//   cuda_embedding.cu   embedding_gather, embedding_scatter_add, embedding_norm_partials,
//                       embedding_renorm_rows
//   cuda_field.cu       weighted_squared_error, channel_affine (free functions of cuda_field.hpp)
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
#include "backend/cuda/cuda_blas.hpp"
#include "backend/cuda/cuda_field.hpp"

namespace tessera::detail {

class CudaCompute final : public Compute {
 public:
  // cuda_blas.cu
  // cuda_gemm; with round_to_bf16, on bf16 copies of the operands (cuda_blas.cu).
  void gemm(const GemmArgs& args, int device) override;
  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) override {
    cuda_axpy(dtype, n, alpha, x, y, device);
  }
  void add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                std::int64_t inner, int device) override {
    cuda_add_bias(dtype, y, bias, outer, channels, inner, device);
  }
  void accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer, std::int64_t channels,
                            std::int64_t inner, int device) override {
    cuda_accumulate_bias_grad(dtype, dy, grad, outer, channels, inner, device);
  }
  double sum(DType dtype, const void* x, std::int64_t n, int device) override {
    return cuda_sum(dtype, x, n, device);
  }
  double dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) override {
    return cuda_dot(dtype, x, y, n, device);
  }

  // cuda_optim.cu (scale: bf16 there, f32/f64 through cuda_blas.cu)
  void scale(DType dtype, std::int64_t n, double alpha, void* y, int device) override;
  double sum_squares(DType dtype, const void* x, std::int64_t n, int device) override;
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device) override;
  void sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                  const SgdStep& step, int device) override;
  void adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg, void* exp_avg_sq,
                    const AdamWStep& step, int device) override;

  // cuda_elementwise.cu
  void activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n, int device) override;
  void activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n,
                           int device) override;
  void swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int device) override;
  void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                       std::int64_t n, int device) override;

  // cuda_norm.cu
  void layer_norm(DType dtype, const void* x, const void* gamma, const void* beta, double eps, void* y, void* mean,
                  void* rstd, std::int64_t rows, std::int64_t n, int device) override;
  void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                           const void* rstd, void* dx, void* grad_gamma, void* grad_beta, std::int64_t rows,
                           std::int64_t n, int device) override;
  void rms_norm(DType dtype, const void* x, const void* gamma, double eps, void* y, void* rstd, std::int64_t rows,
                std::int64_t n, int device) override;
  void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* rstd, void* dx,
                         void* grad_gamma, std::int64_t rows, std::int64_t n, int device) override;

  // cuda_embedding.cu
  void embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                        std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y,
                        int device) override;
  void embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count, void* grad,
                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset, const double* id_scale,
                             std::int64_t skip_id, int device) override;
  void embedding_norm_partials(DType dtype, const std::int64_t* rows, std::int64_t n, const void* table,
                               std::int64_t dim, double norm_type, double* partials, int device) override;
  void embedding_renorm_rows(DType dtype, const std::int64_t* rows, std::int64_t n, void* table, std::int64_t dim,
                             const double* partials, double norm_type, double max_norm, int device) override;

  // cuda_softmax.cu (cross-entropy pieces)
  void row_max(DType dtype, const void* x, std::int64_t n, std::int64_t v, double* out, int device) override;
  void sum_exp_and_target(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max, double* sum_exp,
                          double* target_logit, int device) override;
  void cross_entropy_grad(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max,
                          const double* sum_exp, double denom, void* grad, int device) override;

  // cuda_attention.cu
  void attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                 const AttentionShape& shape, int device) override;
  void attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                          const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                          int device) override;

  // cuda_rope.cu
  void rope(DType dtype, const void* x, void* out, const RopeShape& shape, bool inverse, int device) override;

  // cuda_field.cu
  double weighted_squared_error(DType dtype, const void* prediction, const void* target, const double* row_weights,
                                std::int64_t planes, std::int64_t rows, std::int64_t cols, double grad_scale,
                                void* grad, int device) override {
    return cuda_weighted_squared_error(dtype, prediction, target, row_weights, planes, rows, cols, grad_scale,
                                       grad, device);
  }
  void channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                      std::int64_t channels, std::int64_t inner, int device) override {
    cuda_channel_affine(dtype, x, scale, shift, outer, channels, inner, device);
  }

  // cuda_im2col.cu
  void im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int device) override;
  void col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int device) override;

  // cuda_init.cu
  void init_uniform(DType dtype, void* local_data, const StridedLayout& local, const std::int64_t* offset,
                    const std::int64_t* global_strides, std::uint64_t key, double a, double b, bool constant,
                    int device) override;

  // cuda_halo.cu
  void halo_pack(DType dtype, const void* field, const StridedLayout& layout, const HaloRect& rect, void* out,
                 int device) override;
  void halo_unpack(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, const void* in,
                   bool accumulate, int device) override;
  void halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, int device) override;

  // cuda_compute.cu
  void* allocate_pinned(std::size_t bytes) override;
  void free_pinned(void* ptr) noexcept override;
  void synchronize_stream(int device) override;
  void release_cached_memory(int device) override;
  bool is_device_memory(const void* ptr, int device) override;
};

}  // namespace tessera::detail
