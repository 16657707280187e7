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
  // host_blas.cpp
  void gemm(const GemmArgs& args, int device) override;
  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) override;
  void scale(DType dtype, std::int64_t n, double alpha, void* y, int device) override;
  void add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                std::int64_t inner, int device) override;
  void accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer, std::int64_t channels,
                            std::int64_t inner, int device) override;
  double sum(DType dtype, const void* x, std::int64_t n, int device) override;
  double dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) override;
  double sum_squares(DType dtype, const void* x, std::int64_t n, int device) override;

  // host_elementwise.cpp
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device) override;
  void activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n, int device) override;
  void activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n,
                           int device) override;
  void swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int device) override;
  void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                       std::int64_t n, int device) override;

  // host_optim.cpp
  void sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                  const SgdStep& step, int device) override;
  void adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg, void* exp_avg_sq,
                    const AdamWStep& step, int device) override;

  // host_norm.cpp
  void layer_norm(DType dtype, const void* x, const void* gamma, const void* beta, double eps, void* y, void* mean,
                  void* rstd, std::int64_t rows, std::int64_t n, int device) override;
  void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                           const void* rstd, void* dx, void* grad_gamma, void* grad_beta, std::int64_t rows,
                           std::int64_t n, int device) override;
  void rms_norm(DType dtype, const void* x, const void* gamma, double eps, void* y, void* rstd, std::int64_t rows,
                std::int64_t n, int device) override;
  void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* rstd, void* dx,
                         void* grad_gamma, std::int64_t rows, std::int64_t n, int device) override;

  // host_embedding.cpp
  void embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                        std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y, int device) override;
  void embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count, void* grad,
                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset, const double* id_scale,
                             std::int64_t skip_id, int device) override;
  void embedding_norm_partials(DType dtype, const std::int64_t* rows, std::int64_t n, const void* table,
                               std::int64_t dim, double norm_type, double* partials, int device) override;
  void embedding_renorm_rows(DType dtype, const std::int64_t* rows, std::int64_t n, void* table, std::int64_t dim,
                             const double* partials, double norm_type, double max_norm, int device) override;

  // host_softmax.cpp (cross-entropy pieces)
  void row_max(DType dtype, const void* x, std::int64_t n, std::int64_t v, double* out, int device) override;
  void sum_exp_and_target(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max, double* sum_exp,
                          double* target_logit, int device) override;
  void cross_entropy_grad(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max,
                          const double* sum_exp, double denom, void* grad, int device) override;

  // host_attention.cpp
  void attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                 const AttentionShape& shape, int device) override;
  void attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                          const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                          int device) override;

  // host_rope.cpp
  void rope(DType dtype, const void* x, void* out, const RopeShape& shape, bool inverse, int device) override;

  // host_field.cpp
  double weighted_squared_error(DType dtype, const void* prediction, const void* target, const double* row_weights,
                                std::int64_t planes, std::int64_t rows, std::int64_t cols, double grad_scale,
                                void* grad, int device) override;
  void channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                      std::int64_t channels, std::int64_t inner, int device) override;

  // host_im2col.cpp
  void im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int device) override;
  void col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int device) override;

  // host_init.cpp
  void init_uniform(DType dtype, void* local_data, const StridedLayout& local, const std::int64_t* offset,
                    const std::int64_t* global_strides, std::uint64_t key, double a, double b, bool constant,
                    int device) override;

  // host_halo.cpp
  void halo_pack(DType dtype, const void* field, const StridedLayout& layout, const HaloRect& rect, void* out,
                 int device) override;
  void halo_unpack(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, const void* in,
                   bool accumulate, int device) override;
  void halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, int device) override;

  // host_compute.cpp
  void* allocate_pinned(std::size_t bytes) override;
  void free_pinned(void* ptr) noexcept override;
  void synchronize_stream(int device) override;
  void release_cached_memory(int device) override;
  bool is_device_memory(const void* ptr, int device) override;
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
