#pragma once
// Private: the compute entries of a device backend — GEMM, element-wise kernels,
// reductions, packing, pinned host memory — on raw device pointers. No vendor header
// here, so the layer code (src/nn, src/tp, src/core, ...) can include it and dispatch a
// CUDA tensor with
//
//     detail::device_compute(t.device()).gelu(...)
//
// without ever seeing CUDA. Backend::device_compute() returns it (nullptr for the host
// backend, whose compute stays in the ops/functional loops); a build without CUDA
// never gets here because backend_for(cuda) already throws UnsupportedError.
//
// Conventions: `device` is the CUDA ordinal of the tensors (the call makes it current
// and restores the caller's device); pointers are contiguous device memory; `dtype` is
// f32 or f64 unless stated; work is queued on the device's compute stream and ordered
// with every other tessera operation on it. Functions returning a host value (sum,
// dot) synchronise. Accumulations run in double, as on the host.

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/kernel_math.hpp"
#include "tessera/backend.hpp"
#include "tessera/domain/halo_index.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera::detail {

enum class DeviceActivation { gelu, silu };

struct DeviceGemm {
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
};

class DeviceCompute {
 public:
  virtual ~DeviceCompute() = default;

  // ---- BLAS-like (ops.hpp)
  virtual void gemm(const DeviceGemm& args, int device) = 0;
  virtual void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) = 0;
  virtual void scale(DType dtype, std::int64_t n, double alpha, void* y, int device) = 0;
  // y viewed as [outer, channels, inner]: y[o, c, i] += bias[c]
  virtual void add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                        std::int64_t inner, int device) = 0;
  // grad[c] += sum over (o, i) of dy[o, c, i]
  virtual void accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer,
                                    std::int64_t channels, std::int64_t inner, int device) = 0;
  virtual double sum(DType dtype, const void* x, std::int64_t n, int device) = 0;
  virtual double dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) = 0;

  // ---- Element-wise (nn/functional.hpp, swiglu)
  virtual void activation(DeviceActivation kind, DType dtype, const void* x, void* y, std::int64_t n,
                          int device) = 0;
  virtual void activation_backward(DeviceActivation kind, DType dtype, const void* dy, const void* x, void* dx,
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
  virtual void embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                     void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                     int device) = 0;

  // ---- Softmax / cross-entropy pieces over logits x [n, v] (f64 outputs).
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
  // Attention: scores [batch, S, S] in place -> probabilities (scaled by `scale`, causal
  // mask: exact zeros above the diagonal).
  virtual void softmax_rows(DType dtype, void* scores, std::int64_t batch, std::int64_t seq, double scale,
                            bool causal, int device) = 0;
  // dS = P * (dP - sum_j P dP) * scale, in place over dp [batch, S, S].
  virtual void softmax_backward_rows(DType dtype, const void* probs, void* dp, std::int64_t batch,
                                     std::int64_t seq, double scale, int device) = 0;

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

  // ---- Halo packing (domain/halo_index.hpp): out[i] = field[halo_element_offset(i)]
  // over `rect`; unpack writes (or adds, for the adjoint) the other way.
  virtual void halo_pack(DType dtype, const void* field, const StridedLayout& layout,
                         const domain::detail::HaloRect& rect, void* out, int device) = 0;
  virtual void halo_unpack(DType dtype, void* field, const StridedLayout& layout,
                           const domain::detail::HaloRect& rect, const void* in, bool accumulate, int device) = 0;

  // ---- Pinned (page-locked) host memory for staging, and stream ordering.
  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* ptr) noexcept = 0;
  // Blocks until the device's compute stream is idle.
  virtual void synchronize_stream(int device) = 0;
  // Returns the device's cached free blocks to the driver.
  virtual void release_cached_memory(int device) = 0;
  // Whether `ptr` is memory the device can address (device or managed memory): the
  // check a non-owning CUDA view gets before a kernel touches it.
  virtual bool is_device_memory(const void* ptr, int device) = 0;
};

// The compute entries serving `device`; throws UnsupportedError naming `what` when its
// backend has none (the host backend: callers take their host path first).
inline DeviceCompute& device_compute(Device device, const std::string& what) {
  DeviceCompute* compute = backend_for(device).device_compute();
  if (compute == nullptr) {
    throw UnsupportedError(what + ": the " + backend_for(device).name() + " backend has no device kernels");
  }
  return *compute;
}

// Throws UnsupportedError (the message starts with `who`, then the tensor) when the CUDA
// tensor `t` cannot run on the CUDA compute backend: no device is visible (or the build
// has no CUDA), or `t` is a view of memory that is not device memory.
inline void require_usable_cuda_tensor(const Tensor& t, const std::string& who) {
  if (cuda_device_count() == 0) {
    throw UnsupportedError(who + " " + t.str() + " is a CUDA tensor, but the CUDA compute backend cannot run it: " +
                           cuda_unavailable_reason());
  }
  if (!t.owns_storage() && t.numel() > 0 &&
      !device_compute(t.device(), who).is_device_memory(t.data(), t.device().index)) {
    throw UnsupportedError(who + " " + t.str() +
                           " is a view of memory that is not CUDA device memory; the CUDA compute backend needs "
                           "cudaMalloc'd or managed memory");
  }
}

}  // namespace tessera::detail
