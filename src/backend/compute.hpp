#pragma once
// Private: the one compute interface of tessera. Every kernel a layer, loss, optimizer,
// halo exchange or initialiser runs goes through it; two backends implement it:
//
//   backend/host  (HostCompute: OpenBLAS / any CBLAS for GEMM, plain loops for the rest)
//   backend/cuda  (CudaCompute: cuBLAS for GEMM, CUDA kernels for the rest)
//
// Code above the backend floor never asks which device a tensor is on. It calls
//
//     detail::compute_for(t, "nn::functional::gelu").activation(...)
//
// and the tensor's device picks the implementation (compute_for also checks that the
// device can run the tensor: a CUDA tensor without a visible GPU, or a view of memory
// the GPU cannot address, is an UnsupportedError naming the caller). No vendor header
// here, so src/nn, src/tp, src/domain, ... include it freely.
//
// Conventions: `device` is the tensors' device ordinal (ignored on the host; on CUDA the
// call makes it current and restores the caller's device); pointers are contiguous
// memory of that device; `dtype` is f32 or f64 unless stated; work is ordered with every
// other tessera operation on the device (on CUDA: its compute stream). Functions that
// return a host value (sum, dot, sum_squares) synchronise. Accumulations run in double
// on both backends, so a result differs between them only by fp32 rounding.
//
// Adding a kernel: declare it here, implement it in both backends (host: a loop in the
// backend/host/host_*.cpp file of its family; cuda: a kernel in backend/cuda), call it
// through compute_for from the layer, and add a host test plus its CUDA twin.

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/kernel_math.hpp"
#include "tessera/backend.hpp"
#include "tessera/detail/halo_rect.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera::detail {

enum class Activation { gelu, silu };

// One SGD step's constants (torch.optim.SGD's rule; optim.hpp documents the options).
struct SgdStep {
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  bool first = false;  // the first step copies the direction into the momentum buffer
};

// One AdamW step's constants, precomputed on the host from the step count t:
//   decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^t),
//   bias_correction2_sqrt = sqrt(1 - beta2^t).
struct AdamWStep {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double decay = 1, step_size = 0, bias_correction2_sqrt = 1;
};

struct GemmArgs {
  DType ab = DType::f32;  // dtype of A and B: f32, f64 or bf16
  DType c = DType::f32;   // f32/f64 as A and B; with bf16 inputs bf16 or f32 (f32 accumulation)
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;  // row strides in elements
  const void* b = nullptr;
  std::int64_t ldb = 0;
  void* out = nullptr;
  std::int64_t ldc = 0;
  double alpha = 1.0, beta = 0.0;
  // Precision::bf16_mixed on f32 operands (ab and c f32): A and B are rounded to bf16
  // (nearest even) and multiplied as the bf16 GEMM does, fp32 accumulation. The backend
  // rounds on its side (a scratch copy), so no bf16 tensor is made per call.
  bool round_to_bf16 = false;
};

// The geometry of one attention call (see Compute::attention).
struct AttentionShape {
  std::int64_t batch = 0, seq = 0, width = 0, heads = 1;
  bool causal = false;
  double scale = 1.0;  // 1 / sqrt(head_dim)
  // Grouped-query attention: k and v hold kv_heads heads ([batch, seq, kv_heads * head_dim]);
  // query head h reads key/value head h / (heads / kv_heads). 0 means kv_heads = heads.
  std::int64_t kv_heads = 0;
  std::int64_t head_dim() const { return width / heads; }
  std::int64_t kv_count() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t kv_width() const { return kv_count() * head_dim(); }
  std::int64_t group() const { return heads / kv_count(); }
};

// The geometry of one rotary-embedding call (see Compute::rope).
struct RopeShape {
  std::int64_t batch = 0, seq = 0, width = 0, head_dim = 2;  // width = heads * head_dim, head_dim even
  double theta = 10000.0;
};

class Compute {
 public:
  virtual ~Compute() = default;

  // ---- BLAS-like (ops.hpp). gemm: A and B f32, f64 or bf16 (bf16: fp32 accumulation,
  // C bf16 or f32; and f32 with round_to_bf16); host bf16 is the BLAS's sbgemm where it
  // has one, else f32 operands holding the bf16 values and sgemm.
  virtual void gemm(const GemmArgs& args, int device) = 0;
  virtual void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) = 0;
  // y *= alpha; dtype f32, f64 or bf16. f32: y = float(double(y) * alpha), one rounding
  // (ops::scale passes float(alpha), which makes that the float product); bf16:
  // y = bf16(float(y) * alpha), as clipping needs.
  virtual void scale(DType dtype, std::int64_t n, double alpha, void* y, int device) = 0;
  // y viewed as [outer, channels, inner]: y[o, c, i] += bias[c]
  virtual void add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                        std::int64_t inner, int device) = 0;
  // grad[c] += sum over (o, i) of dy[o, c, i]
  virtual void accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer,
                                    std::int64_t channels, std::int64_t inner, int device) = 0;
  virtual double sum(DType dtype, const void* x, std::int64_t n, int device) = 0;
  virtual double dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) = 0;
  // sum of x[i]^2 in double; dtype f32, f64 or bf16 (each element widened first).
  virtual double sum_squares(DType dtype, const void* x, std::int64_t n, int device) = 0;

  // ---- Casts: dst[i] = src[i] converted; f32, f64 and bf16 in any pair (to bf16:
  // round to nearest even, as tessera::bfloat16). Same dtype is a copy.
  virtual void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device) = 0;

  // ---- Optimizer updates, element-wise in double, stored back in `dtype` (f32/f64).
  // momentum_buffer is null when momentum == 0.
  virtual void sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                          const SgdStep& step, int device) = 0;
  virtual void adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg,
                            void* exp_avg_sq, const AdamWStep& step, int device) = 0;

  // ---- Element-wise (nn/functional.hpp, swiglu)
  virtual void activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n,
                          int device) = 0;
  virtual void activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx,
                                   std::int64_t n, int device) = 0;
  virtual void swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int device) = 0;
  virtual void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate,
                               void* dup, std::int64_t n, int device) = 0;

  // ---- Norms over the last dim of x [rows, n]; gamma/beta/grad_* may be null.
  virtual void layer_norm(DType dtype, const void* x, const void* gamma, const void* beta, double eps, void* y,
                          void* mean, void* rstd, std::int64_t rows, std::int64_t n, int device) = 0;
  virtual void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma,
                                   const void* mean, const void* rstd, void* dx, void* grad_gamma,
                                   void* grad_beta, std::int64_t rows, std::int64_t n, int device) = 0;
  virtual void rms_norm(DType dtype, const void* x, const void* gamma, double eps, void* y, void* rstd,
                        std::int64_t rows, std::int64_t n, int device) = 0;
  virtual void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* rstd,
                                 void* dx, void* grad_gamma, std::int64_t rows, std::int64_t n, int device) = 0;

  // ---- Embedding (ids: i64 device memory). Out-of-shard ids give zero rows / are skipped.
  virtual void embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                                std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y,
                                int device) = 0;
  // id_scale (f64 [count], or null for 1) scales each id's row of dy; ids equal to
  // skip_id (a global id, -1 for none: the padding row) add nothing.
  virtual void embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                     void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                     const double* id_scale, std::int64_t skip_id, int device) = 0;
  // max_norm: partial norms of the local rows rows[0, n) of table [*, dim]
  // (embedding_norm.hpp), then the in-place rescale of each row whose combined norm
  // (from partials[i]) exceeds max_norm.
  virtual void embedding_norm_partials(DType dtype, const std::int64_t* rows, std::int64_t n, const void* table,
                                       std::int64_t dim, double norm_type, double* partials, int device) = 0;
  virtual void embedding_renorm_rows(DType dtype, const std::int64_t* rows, std::int64_t n, void* table,
                                     std::int64_t dim, const double* partials, double norm_type, double max_norm,
                                     int device) = 0;

  // ---- Cross-entropy pieces over logits x [n, v] (f64 outputs).
  virtual void row_max(DType dtype, const void* x, std::int64_t n, std::int64_t v, double* out, int device) = 0;
  // sum_exp[i] = sum_j exp(x_ij - row_max[i]); target_logit[i] = x[i, target col] or 0.
  virtual void sum_exp_and_target(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n,
                                  std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                  const double* row_max, double* sum_exp, double* target_logit, int device) = 0;
  // grad[i, j] = (softmax_ij - [first + j == t_i]) / denom; zero rows for ignored targets.
  virtual void cross_entropy_grad(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n,
                                  std::int64_t v, std::int64_t first, std::int64_t ignore_index,
                                  const double* row_max, const double* sum_exp, double denom, void* grad,
                                  int device) = 0;

  // ---- Attention core per (batch, head) over q, k, v [batch, seq, width] with
  // width = heads * head_dim (head h owns columns [h*head_dim, (h+1)*head_dim)):
  // probs [batch, heads, seq, seq] = softmax(scale * Q K^T) (causal: exact zeros above the
  // diagonal), out = probs V. The backward writes dq, dk, dv from dout and the saved probs.
  virtual void attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                         const AttentionShape& shape, int device) = 0;
  virtual void attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                                  const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                                  int device) = 0;

  // ---- Rotary position embeddings over x [batch, seq, width], width = heads * head_dim:
  // in each head the interleaved pair (2i, 2i+1) at position s is rotated by the angle
  // s * theta^(-2i / head_dim) (rope_math.hpp, shared by both backends; angles, sines
  // and products in double). `inverse` rotates by minus that angle: the backward, as a
  // rotation's adjoint is its inverse. out may equal x.
  virtual void rope(DType dtype, const void* x, void* out, const RopeShape& shape, bool inverse, int device) = 0;

  // ---- Field losses and normalisation over x [outer, channels or rows, inner].
  // Latitude-weighted squared error over [planes, rows, cols]: returns
  // sum of w[i] (p - t)^2 and writes grad = grad_scale * w[i] * (p - t); row_weights are
  // `rows` doubles in the device's memory.
  virtual double weighted_squared_error(DType dtype, const void* prediction, const void* target,
                                        const double* row_weights, std::int64_t planes, std::int64_t rows,
                                        std::int64_t cols, double grad_scale, void* grad, int device) = 0;
  // x[o, c, i] = x[o, c, i] * scale[c] + shift[c] in double; scale/shift are `channels`
  // doubles in the device's memory.
  virtual void channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                              std::int64_t channels, std::int64_t inner, int device) = 0;

  // ---- Conv2d helpers for one sample.
  virtual void im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int device) = 0;
  // dx += col2im(cols)
  virtual void col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int device) = 0;

  // ---- Initialisation: element `linear` of the block gets uniform_in(a, b, uniform53)
  // of its Philox block (or the constant a). dtype f32, f64 or bf16; `local` is the
  // block's layout (strides in elements), offset/global_strides per dim.
  virtual void init_uniform(DType dtype, void* local_data, const StridedLayout& local, const std::int64_t* offset,
                            const std::int64_t* global_strides, std::uint64_t key, double a, double b,
                            bool constant, int device) = 0;

  // ---- Halo packing (tessera/detail/halo_rect.hpp): out[i] = field[halo_element_offset(i)]
  // over `rect`; unpack writes (or adds, for the adjoint) the other way. pack and
  // non-accumulating unpack move any dtype; accumulate needs f32 or f64.
  virtual void halo_pack(DType dtype, const void* field, const StridedLayout& layout,
                         const HaloRect& rect, void* out, int device) = 0;
  virtual void halo_unpack(DType dtype, void* field, const StridedLayout& layout,
                           const HaloRect& rect, const void* in, bool accumulate, int device) = 0;
  // Zeroes `rect` of the field (the rows beyond a pole; the halo before an adjoint).
  virtual void halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect,
                         int device) = 0;

  // ---- Pinned (page-locked) host memory for staging, and stream ordering. The host
  // backend hands out ordinary aligned memory and has nothing to synchronise.
  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* ptr) noexcept = 0;
  // Blocks until the device's compute stream is idle.
  virtual void synchronize_stream(int device) = 0;
  // Returns the device's cached free blocks to the driver.
  virtual void release_cached_memory(int device) = 0;
  // Whether `ptr` is memory the device can address (device or managed memory): the
  // check a non-owning CUDA view gets before a kernel touches it (always true on the host).
  virtual bool is_device_memory(const void* ptr, int device) = 0;
};

// The compute entries serving `t`'s device, after checking that the device can run `t`
// (Backend::require_usable). `who` starts every error message ("ops::gemm: A").
inline Compute& compute_for(const Tensor& t, const std::string& who) {
  require_usable(t, who);
  return backend_for(t.device()).compute();
}

// The compute entries of a device, without a tensor to check (a Mesh's device).
inline Compute& compute_for(Device device) { return backend_for(device).compute(); }

}  // namespace tessera::detail
