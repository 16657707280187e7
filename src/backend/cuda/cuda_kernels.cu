// CUDA backend, kernel half: the element-wise, normalisation, embedding, softmax /
// cross-entropy, convolution-column, initialisation and halo-packing kernels, and the
// Compute object that serves them (with the BLAS entries of cuda_blas.cu).
//
// Every kernel computes what its host twin computes: values in double, rounded once to
// the tensor's dtype; row statistics and reductions in double with a fixed combination
// order (deterministic for a given shape). The one exception is the embedding
// scatter-add, which uses atomicAdd (the order of additions into a shared row varies
// from run to run, as in every GPU framework). Index math comes from kernel_math.hpp,
// strided_index.hpp and detail/halo_rect.hpp, which the host tests exercise.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_blas.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_field.hpp"
#include "backend/cuda/cuda_optim.hpp"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/compute.hpp"
#include "backend/kernel_math.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/philox.hpp"
#include "tessera/detail/halo_rect.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

// One block per row, striding when there are more rows than the grid holds.
#define TESSERA_BLOCK_ROWS(r, rows) for (std::int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

unsigned row_grid(std::int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}


// ---- Activations (the formulas of functional_activation.cpp / swiglu.cpp)

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

__device__ double gelu_value(double x) { return 0.5 * x * (1.0 + erf(x * kInvSqrt2)); }
__device__ double gelu_derivative(double x) {
  return 0.5 * (1.0 + erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * exp(-0.5 * x * x);
}
__device__ double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}
__device__ double silu_value(double x) { return x * sigmoid(x); }
__device__ double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

template <class T>
__global__ void activation_kernel(bool gelu, const T* x, T* y, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    y[i] = static_cast<T>(gelu ? gelu_value(v) : silu_value(v));
  }
}

template <class T>
__global__ void activation_backward_kernel(bool gelu, const T* dy, const T* x, T* dx, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    dx[i] = static_cast<T>(static_cast<double>(dy[i]) * (gelu ? gelu_derivative(v) : silu_derivative(v)));
  }
}

template <class T>
__global__ void swiglu_kernel(const T* gate, const T* up, T* y, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double g = static_cast<double>(gate[i]);
    y[i] = static_cast<T>(g * sigmoid(g) * static_cast<double>(up[i]));
  }
}

template <class T>
__global__ void swiglu_backward_kernel(const T* dy, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    const double g = static_cast<double>(gate[i]);
    const double s = sigmoid(g);
    const double d = static_cast<double>(dy[i]);
    dgate[i] = static_cast<T>(d * static_cast<double>(up[i]) * s * (1.0 + g * (1.0 - s)));
    dup[i] = static_cast<T>(d * g * s);
  }
}

// ---- Norms (functional_norm.cpp): one block per row; two passes for the variance.

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean, T* rstd,
                                  std::int64_t rows, std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    T* out = y + r * n;
    double s = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(in[i]);
    const double mu = block_sum(s) / static_cast<double>(n);
    double sq = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = static_cast<double>(in[i]) - mu;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(block_sum(sq) / static_cast<double>(n) + eps);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      double v = (static_cast<double>(in[i]) - mu) * inv;
      if (gamma) v *= static_cast<double>(gamma[i]);
      if (beta) v += static_cast<double>(beta[i]);
      out[i] = static_cast<T>(v);
    }
    if (threadIdx.x == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(inv);
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma. `mean` null: RMSNorm
// (xhat = x rstd, no mean(g) term).
template <class T>
__global__ void norm_backward_rows_kernel(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                                          T* dx, std::int64_t rows, std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    const T* d = dy + r * n;
    T* out = dx + r * n;
    const double mu = mean ? static_cast<double>(mean[r]) : 0.0;
    const double inv = static_cast<double>(rstd[r]);
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double xhat = (static_cast<double>(in[i]) - mu) * inv;
      const double g = gamma ? static_cast<double>(d[i]) * static_cast<double>(gamma[i]) : static_cast<double>(d[i]);
      sum_g += g;
      sum_gx += g * xhat;
    }
    const double mean_g = mean ? block_sum(sum_g) / static_cast<double>(n) : 0.0;
    const double mean_gx = block_sum(sum_gx) / static_cast<double>(n);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double xhat = (static_cast<double>(in[i]) - mu) * inv;
      const double g = gamma ? static_cast<double>(d[i]) * static_cast<double>(gamma[i]) : static_cast<double>(d[i]);
      out[i] = static_cast<T>(inv * (g - mean_g - xhat * mean_gx));
    }
  }
}

// One thread per column: dgamma[i] += sum_rows dy xhat, dbeta[i] += sum_rows dy (rows in
// order, as on the host).
template <class T>
__global__ void norm_param_grad_kernel(const T* dy, const T* x, const T* mean, const T* rstd, T* grad_gamma,
                                       T* grad_beta, std::int64_t rows, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) {
    double dg = 0, db = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double d = static_cast<double>(dy[r * n + i]);
      const double mu = mean ? static_cast<double>(mean[r]) : 0.0;
      dg += d * ((static_cast<double>(x[r * n + i]) - mu) * static_cast<double>(rstd[r]));
      db += d;
    }
    if (grad_gamma) grad_gamma[i] += static_cast<T>(dg);
    if (grad_beta) grad_beta[i] += static_cast<T>(db);
  }
}

template <class T>
__global__ void rms_norm_kernel(const T* x, const T* gamma, double eps, T* y, T* rstd, std::int64_t rows,
                                std::int64_t n) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* in = x + r * n;
    T* out = y + r * n;
    double sq = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) sq += static_cast<double>(in[i]) * in[i];
    const double inv = 1.0 / sqrt(block_sum(sq) / static_cast<double>(n) + eps);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      out[i] = static_cast<T>(gamma ? in[i] * inv * gamma[i] : in[i] * inv);
    }
    if (threadIdx.x == 0) rstd[r] = static_cast<T>(inv);
  }
}

// ---- Embedding

template <class T>
__global__ void embedding_gather_kernel(const std::int64_t* ids, std::int64_t count, const T* table,
                                        std::int64_t rows, std::int64_t dim, std::int64_t row_offset, T* y) {
  TESSERA_GRID_STRIDE(e, count * dim) {
    const std::int64_t k = e / dim, d = e % dim;
    const std::int64_t local = embedding_local_row(ids[k], row_offset, rows);
    y[e] = local >= 0 ? table[local * dim + d] : T(0);
  }
}

template <class T>
__global__ void embedding_scatter_add_kernel(const T* dy, const std::int64_t* ids, std::int64_t count, T* grad,
                                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset) {
  TESSERA_GRID_STRIDE(e, count * dim) {
    const std::int64_t k = e / dim, d = e % dim;
    const std::int64_t local = embedding_local_row(ids[k], row_offset, rows);
    if (local >= 0) atomicAdd(grad + local * dim + d, dy[e]);
  }
}

// ---- Softmax / cross-entropy pieces (tp/cross_entropy.cpp)

template <class T>
__global__ void row_max_kernel(const T* x, std::int64_t n, std::int64_t v, double* out) {
  TESSERA_BLOCK_ROWS(r, n) {
    double m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmax(m, static_cast<double>(x[r * v + j]));
    m = block_max(m);
    if (threadIdx.x == 0) out[r] = m;
  }
}

template <class T>
__global__ void sum_exp_target_kernel(const T* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                                      std::int64_t first, std::int64_t ignore_index, const double* row_max,
                                      double* sum_exp, double* target_logit) {
  TESSERA_BLOCK_ROWS(r, n) {
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) s += exp(static_cast<double>(x[r * v + j]) - row_max[r]);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      sum_exp[r] = s;
      const std::int64_t col = vocab_target_column(targets[r], first, v, ignore_index);
      target_logit[r] = col >= 0 ? static_cast<double>(x[r * v + col]) : 0.0;
    }
  }
}

template <class T>
__global__ void cross_entropy_grad_kernel(const T* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                                          std::int64_t first, std::int64_t ignore_index, const double* row_max,
                                          const double* sum_exp, double denom, T* grad) {
  TESSERA_GRID_STRIDE(e, n * v) {
    const std::int64_t i = e / v, j = e % v;
    if (targets[i] == ignore_index) {
      grad[e] = T(0);
      continue;
    }
    double p = exp(static_cast<double>(x[e]) - row_max[i]) / sum_exp[i];
    if (first + j == targets[i]) p -= 1.0;
    grad[e] = static_cast<T>(p / denom);
  }
}

// Attention rows: scores [batch * S, S] -> probabilities in place.
template <class T>
__global__ void softmax_rows_kernel(T* scores, std::int64_t rows, std::int64_t seq, double scale, bool causal) {
  TESSERA_BLOCK_ROWS(r, rows) {
    T* row = scores + r * seq;
    const std::int64_t keys = attention_keys(r % seq, seq, causal);
    double m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) m = fmax(m, static_cast<double>(row[j]) * scale);
    m = block_max(m);
    double total = 0;
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) total += exp(static_cast<double>(row[j]) * scale - m);
    total = block_sum(total);
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      row[j] = j < keys ? static_cast<T>(exp(static_cast<double>(row[j]) * scale - m) / total) : T(0);
    }
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(const T* probs, T* dp, std::int64_t rows, std::int64_t seq,
                                             double scale) {
  TESSERA_BLOCK_ROWS(r, rows) {
    const T* p = probs + r * seq;
    T* d = dp + r * seq;
    double dotp = 0;
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) dotp += static_cast<double>(p[j]) * static_cast<double>(d[j]);
    dotp = block_sum(dotp);
    for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      d[j] = static_cast<T>(static_cast<double>(p[j]) * (static_cast<double>(d[j]) - dotp) * scale);
    }
  }
}

// ---- Convolution columns

template <class T>
__global__ void im2col_kernel(const T* x, T* cols, Im2colGeometry g) {
  TESSERA_GRID_STRIDE(e, g.c_in * g.kh * g.kw * g.oh * g.ow) {
    const std::int64_t src = im2col_source(e, g);
    cols[e] = src >= 0 ? x[src] : T(0);
  }
}

template <class T>
__global__ void col2im_add_kernel(const T* cols, T* dx, Im2colGeometry g) {
  TESSERA_GRID_STRIDE(e, g.c_in * g.h * g.w) {
    const std::int64_t ix = e % g.w, iy = (e / g.w) % g.h, c = e / (g.w * g.h);
    T acc = T(0);
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t entry = col2im_entry(c, iy, ix, i, j, g);
        if (entry >= 0) acc += cols[entry];
      }
    dx[e] += acc;
  }
}

// ---- Initialisation

struct BlockIndex {
  std::int64_t offset[kMaxDims];
  std::int64_t global_strides[kMaxDims];
};

template <class T>
__global__ void init_uniform_kernel(T* data, StridedLayout local, BlockIndex index, std::uint64_t key, double a,
                                    double b, bool constant, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    double v = a;
    if (!constant) {
      const auto g = static_cast<std::uint64_t>(block_global_index(e, local, index.offset, index.global_strides));
      const Philox4x32 r = philox_element_block(key, g);
      v = uniform_in(a, b, uniform53(r.v[0], r.v[1]));
    }
    data[strided_offset(e, local)] = round_from_double<T>(v);
  }
}

// ---- Halo packing

template <class Word>
__global__ void halo_pack_kernel(const Word* field, StridedLayout layout, HaloRect rect, Word* out,
                                 std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) { out[e] = field[halo_element_offset(e, layout, rect)]; }
}

template <class Word>
__global__ void halo_zero_kernel(Word* field, StridedLayout layout, HaloRect rect, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) { field[halo_element_offset(e, layout, rect)] = Word(0); }
}

template <class T>
__global__ void halo_unpack_kernel(T* field, StridedLayout layout, HaloRect rect, const T* in,
                                   bool accumulate, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    T& dst = field[halo_element_offset(e, layout, rect)];
    dst = accumulate ? static_cast<T>(static_cast<float>(dst) + static_cast<float>(in[e])) : in[e];
  }
}
template <>
__global__ void halo_unpack_kernel<double>(double* field, StridedLayout layout, HaloRect rect,
                                           const double* in, bool accumulate, std::int64_t count) {
  TESSERA_GRID_STRIDE(e, count) {
    double& dst = field[halo_element_offset(e, layout, rect)];
    dst = accumulate ? dst + in[e] : in[e];
  }
}

// Calls f(Word{}) with the unsigned word as wide as one element of `dtype`: packing and
// zeroing move bits, whatever the element type.
template <class F>
void word_dispatch(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    default: f(std::uint64_t{}); break;
  }
}

std::int64_t halo_count(const StridedLayout& layout, const HaloRect& rect) {
  std::int64_t count = halo_rect_area(rect);
  for (int d = 0; d < layout.ndim - 2; ++d) count *= layout.shape[d];
  return count;
}

// ---------------------------------------------------------------------------

class CudaCompute final : public Compute {
 public:
  void gemm(const GemmArgs& args, int device) override { cuda_gemm(args, device); }
  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device) override {
    cuda_axpy(dtype, n, alpha, x, y, device);
  }
  void scale(DType dtype, std::int64_t n, double alpha, void* y, int device) override {
    if (dtype == DType::bf16) {
      cuda_scale_bf16(n, alpha, y, device);
    } else {
      cuda_scale(dtype, n, alpha, y, device);
    }
  }
  double sum_squares(DType dtype, const void* x, std::int64_t n, int device) override {
    return cuda_sum_squares(dtype, x, n, device);
  }
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device) override {
    cuda_cast(src_dtype, src, dst_dtype, dst, n, device);
  }
  double weighted_squared_error(DType dtype, const void* prediction, const void* target, const double* row_weights,
                                std::int64_t planes, std::int64_t rows, std::int64_t cols, double grad_scale,
                                void* grad, int device) override {
    return cuda_weighted_squared_error(dtype, prediction, target, row_weights, planes, rows, cols, grad_scale, grad,
                                       device);
  }
  void channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                      std::int64_t channels, std::int64_t inner, int device) override {
    cuda_channel_affine(dtype, x, scale, shift, outer, channels, inner, device);
  }
  void sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                  const SgdStep& step, int device) override {
    cuda_sgd_update(dtype, n, value, grad, momentum_buffer, step, device);
  }
  void adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg, void* exp_avg_sq,
                    const AdamWStep& step, int device) override {
    cuda_adamw_update(dtype, n, value, grad, exp_avg, exp_avg_sq, step, device);
  }
  void add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                std::int64_t inner, int device) override {
    cuda_add_bias(dtype, y, bias, outer, channels, inner, device);
  }
  void accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer, std::int64_t channels,
                            std::int64_t inner, int device) override {
    cuda_accumulate_bias_grad(dtype, dy, grad, outer, channels, inner, device);
  }
  double sum(DType dtype, const void* x, std::int64_t n, int device) override { return cuda_sum(dtype, x, n, device); }
  double dot(DType dtype, const void* x, const void* y, std::int64_t n, int device) override {
    return cuda_dot(dtype, x, y, n, device);
  }

  void activation(Activation kind, DType dtype, const void* x, void* y, std::int64_t n, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "activation", [&](auto tag) {
      using T = decltype(tag);
      activation_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(kind == Activation::gelu,
                                                                     static_cast<const T*>(x), static_cast<T*>(y), n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void activation_backward(Activation kind, DType dtype, const void* dy, const void* x, void* dx,
                           std::int64_t n, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "activation_backward", [&](auto tag) {
      using T = decltype(tag);
      activation_backward_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
          kind == Activation::gelu, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void swiglu(DType dtype, const void* gate, const void* up, void* y, std::int64_t n, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "swiglu", [&](auto tag) {
      using T = decltype(tag);
      swiglu_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(gate),
                                                                 static_cast<const T*>(up), static_cast<T*>(y), n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                       std::int64_t n, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "swiglu_backward", [&](auto tag) {
      using T = decltype(tag);
      swiglu_backward_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(dgate),
          static_cast<T*>(dup), n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void layer_norm(DType dtype, const void* x, const void* gamma, const void* beta, double eps, void* y, void* mean,
                  void* rstd, std::int64_t rows, std::int64_t n, int device) override {
    if (rows == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "layer_norm", [&](auto tag) {
      using T = decltype(tag);
      layer_norm_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), eps,
          static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd), rows, n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                           const void* rstd, void* dx, void* grad_gamma, void* grad_beta, std::int64_t rows,
                           std::int64_t n, int device) override {
    norm_backward(dtype, dy, x, gamma, mean, rstd, dx, grad_gamma, grad_beta, rows, n, device);
  }

  void rms_norm(DType dtype, const void* x, const void* gamma, double eps, void* y, void* rstd, std::int64_t rows,
                std::int64_t n, int device) override {
    if (rows == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "rms_norm", [&](auto tag) {
      using T = decltype(tag);
      rms_norm_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x),
                                                                      static_cast<const T*>(gamma), eps,
                                                                      static_cast<T*>(y), static_cast<T*>(rstd), rows, n);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* rstd, void* dx,
                         void* grad_gamma, std::int64_t rows, std::int64_t n, int device) override {
    norm_backward(dtype, dy, x, gamma, nullptr, rstd, dx, grad_gamma, nullptr, rows, n, device);
  }

  void embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table,
                        std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y, int device) override {
    if (count * dim == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "embedding", [&](auto tag) {
      using T = decltype(tag);
      embedding_gather_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
          ids, count, static_cast<const T*>(table), rows, dim, row_offset, static_cast<T*>(y));
    });
    TESSERA_CHECK_LAUNCH();
  }

  void embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count, void* grad,
                             std::int64_t rows, std::int64_t dim, std::int64_t row_offset, int device) override {
    if (count * dim == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "embedding_backward", [&](auto tag) {
      using T = decltype(tag);
      embedding_scatter_add_kernel<T><<<grid_for(count * dim), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(dy), ids, count, static_cast<T*>(grad), rows, dim, row_offset);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void row_max(DType dtype, const void* x, std::int64_t n, std::int64_t v, double* out, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "row_max", [&](auto tag) {
      using T = decltype(tag);
      row_max_kernel<T><<<row_grid(n), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), n, v, out);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void sum_exp_and_target(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max, double* sum_exp,
                          double* target_logit, int device) override {
    if (n == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "sum_exp_and_target", [&](auto tag) {
      using T = decltype(tag);
      sum_exp_target_kernel<T><<<row_grid(n), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(x), targets, n, v, first, ignore_index, row_max, sum_exp, target_logit);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void cross_entropy_grad(DType dtype, const void* x, const std::int64_t* targets, std::int64_t n, std::int64_t v,
                          std::int64_t first, std::int64_t ignore_index, const double* row_max,
                          const double* sum_exp, double denom, void* grad, int device) override {
    if (n * v == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "cross_entropy_grad", [&](auto tag) {
      using T = decltype(tag);
      cross_entropy_grad_kernel<T><<<grid_for(n * v), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(x), targets, n, v, first, ignore_index, row_max, sum_exp, denom, static_cast<T*>(grad));
    });
    TESSERA_CHECK_LAUNCH();
  }

  // Attention per (batch, head): GEMMs on the head's column block (row stride W) and row
  // kernels for the softmax and its backward.
  void attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                 const AttentionShape& shape, int device) override {
    const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, H = shape.heads, hd = shape.head_dim();
    if (B * S == 0) return;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = b * S * W + h * hd;
        // scores = Q K^T (scaled inside the softmax kernel)
        head_gemm(dtype, false, true, S, S, hd, at(q, base, dtype), W, at(k, base, dtype), W,
                  at(probs, (b * H + h) * S * S, dtype), S, device);
      }
    softmax_rows(dtype, probs, B * H, S, shape.scale, shape.causal, device);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = b * S * W + h * hd;
        head_gemm(dtype, false, false, S, hd, S, at(probs, (b * H + h) * S * S, dtype), S, at(v, base, dtype), W,
                  at(out, base, dtype), W, device);
      }
  }

  void attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                          const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                          int device) override {
    const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, H = shape.heads, hd = shape.head_dim();
    if (B * S == 0) return;
    DeviceGuard guard(device);
    DeviceScratch dp_scratch(static_cast<std::size_t>(B * H * S * S) * dtype_size(dtype), guard.device());
    void* dp = dp_scratch.as<void>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = b * S * W + h * hd;
        // dP = dO V^T
        head_gemm(dtype, false, true, S, S, hd, at(dout, base, dtype), W, at(v, base, dtype), W,
                  at(dp, (b * H + h) * S * S, dtype), S, device);
      }
    // dS = P (dP - rowsum(P dP)) scale, in place
    softmax_backward_rows(dtype, probs, dp, B * H, S, shape.scale, device);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = b * S * W + h * hd;
        const void* ds = at(dp, (b * H + h) * S * S, dtype);
        const void* p = at(probs, (b * H + h) * S * S, dtype);
        head_gemm(dtype, false, false, S, hd, S, ds, S, at(k, base, dtype), W, at(dq, base, dtype), W, device);
        head_gemm(dtype, true, false, S, hd, S, ds, S, at(q, base, dtype), W, at(dk, base, dtype), W, device);
        head_gemm(dtype, true, false, S, hd, S, p, S, at(dout, base, dtype), W, at(dv, base, dtype), W, device);
      }
  }

  void im2col(DType dtype, const void* x, void* cols, const Im2colGeometry& g, int device) override {
    const std::int64_t count = g.c_in * g.kh * g.kw * g.oh * g.ow;
    if (count == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "im2col", [&](auto tag) {
      using T = decltype(tag);
      im2col_kernel<T><<<grid_for(count), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(cols), g);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void col2im_add(DType dtype, const void* cols, void* dx, const Im2colGeometry& g, int device) override {
    const std::int64_t count = g.c_in * g.h * g.w;
    if (count == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "col2im", [&](auto tag) {
      using T = decltype(tag);
      col2im_add_kernel<T><<<grid_for(count), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(cols),
                                                                          static_cast<T*>(dx), g);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void init_uniform(DType dtype, void* local_data, const StridedLayout& local, const std::int64_t* offset,
                    const std::int64_t* global_strides, std::uint64_t key, double a, double b, bool constant,
                    int device) override {
    std::int64_t count = 1;
    for (int d = 0; d < local.ndim; ++d) count *= local.shape[d];
    if (count == 0) return;
    BlockIndex index{};
    for (int d = 0; d < local.ndim; ++d) {
      index.offset[d] = offset[d];
      index.global_strides[d] = global_strides[d];
    }
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    const unsigned grid = grid_for(count);
    switch (dtype) {
      case DType::f32:
        init_uniform_kernel<float><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<float*>(local_data), local, index,
                                                                      key, a, b, constant, count);
        break;
      case DType::f64:
        init_uniform_kernel<double><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<double*>(local_data), local,
                                                                       index, key, a, b, constant, count);
        break;
      case DType::bf16:
        init_uniform_kernel<bfloat16><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<bfloat16*>(local_data), local,
                                                                         index, key, a, b, constant, count);
        break;
      default: throw ShapeError("cuda init_uniform: dtype must be f32, f64 or bf16");
    }
    TESSERA_CHECK_LAUNCH();
  }

  void halo_pack(DType dtype, const void* field, const StridedLayout& layout, const HaloRect& rect,
                 void* out, int device) override {
    const std::int64_t count = halo_count(layout, rect);
    if (count == 0) return;
    DeviceGuard guard(device);
    word_dispatch(dtype, [&](auto word) {
      using Word = decltype(word);
      halo_pack_kernel<Word><<<grid_for(count), kThreadsPerBlock, 0, compute_stream(guard.device())>>>(
          static_cast<const Word*>(field), layout, rect, static_cast<Word*>(out), count);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void halo_unpack(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect,
                   const void* in, bool accumulate, int device) override {
    const std::int64_t count = halo_count(layout, rect);
    if (count == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    const unsigned grid = grid_for(count);
    switch (dtype) {
      case DType::f32:
        halo_unpack_kernel<float><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<float*>(field), layout, rect,
                                                                     static_cast<const float*>(in), accumulate, count);
        break;
      case DType::f64:
        halo_unpack_kernel<double><<<grid, kThreadsPerBlock, 0, s>>>(
            static_cast<double*>(field), layout, rect, static_cast<const double*>(in), accumulate, count);
        break;
      case DType::bf16:
        halo_unpack_kernel<bfloat16><<<grid, kThreadsPerBlock, 0, s>>>(
            static_cast<bfloat16*>(field), layout, rect, static_cast<const bfloat16*>(in), accumulate, count);
        break;
      default: throw ShapeError("cuda halo_unpack: dtype must be f32, f64 or bf16");
    }
    TESSERA_CHECK_LAUNCH();
  }

  void halo_zero(DType dtype, void* field, const StridedLayout& layout, const HaloRect& rect, int device) override {
    const std::int64_t count = halo_count(layout, rect);
    if (count == 0) return;
    DeviceGuard guard(device);
    word_dispatch(dtype, [&](auto word) {
      using Word = decltype(word);
      halo_zero_kernel<Word><<<grid_for(count), kThreadsPerBlock, 0, compute_stream(guard.device())>>>(
          static_cast<Word*>(field), layout, rect, count);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void* allocate_pinned(std::size_t bytes) override {
    void* ptr = nullptr;
    if (bytes == 0) return nullptr;
    TESSERA_CHECK_CUDA(cudaMallocHost(&ptr, bytes));
    return ptr;
  }
  void free_pinned(void* ptr) noexcept override {
    if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  }
  void synchronize_stream(int device) override {
    DeviceGuard guard(device);
    TESSERA_CHECK_CUDA(cudaStreamSynchronize(compute_stream(guard.device())));
  }
  void release_cached_memory(int device) override { caching_release_cached(device); }
  bool is_device_memory(const void* ptr, int device) override {
    DeviceGuard guard(device);
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  }

 private:
  // Address of element `element` of an array of `dtype`.
  static void* at(const void* base, std::int64_t element, DType dtype) {
    return static_cast<unsigned char*>(const_cast<void*>(base)) + element * static_cast<std::int64_t>(dtype_size(dtype));
  }

  // C [m, n] (row stride ldc) = op(A) op(B) for one head's blocks.
  static void head_gemm(DType dtype, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
                        std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc, int device) {
    GemmArgs g;
    g.ab = g.c = dtype;
    g.transpose_a = ta;
    g.transpose_b = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.lda = lda;
    g.b = b;
    g.ldb = ldb;
    g.out = c;
    g.ldc = ldc;
    cuda_gemm(g, device);
  }

  void softmax_rows(DType dtype, void* scores, std::int64_t batch, std::int64_t seq, double scale, bool causal,
                    int device) {
    const std::int64_t rows = batch * seq;
    if (rows == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "softmax_rows", [&](auto tag) {
      using T = decltype(tag);
      softmax_rows_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(static_cast<T*>(scores), rows, seq, scale,
                                                                          causal);
    });
    TESSERA_CHECK_LAUNCH();
  }

  void softmax_backward_rows(DType dtype, const void* probs, void* dp, std::int64_t batch, std::int64_t seq,
                             double scale, int device) {
    const std::int64_t rows = batch * seq;
    if (rows == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "softmax_backward_rows", [&](auto tag) {
      using T = decltype(tag);
      softmax_backward_rows_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(probs), static_cast<T*>(dp), rows, seq, scale);
    });
    TESSERA_CHECK_LAUNCH();
  }

  static void norm_backward(DType dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                            const void* rstd, void* dx, void* grad_gamma, void* grad_beta, std::int64_t rows,
                            std::int64_t n, int device) {
    if (rows == 0) return;
    DeviceGuard guard(device);
    cudaStream_t s = compute_stream(guard.device());
    float_dispatch(dtype, "norm_backward", [&](auto tag) {
      using T = decltype(tag);
      norm_backward_rows_kernel<T><<<row_grid(rows), kThreadsPerBlock, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(gamma),
          static_cast<const T*>(mean), static_cast<const T*>(rstd), static_cast<T*>(dx), rows, n);
      if (grad_gamma != nullptr || grad_beta != nullptr) {
        norm_param_grad_kernel<T><<<grid_for(n), kThreadsPerBlock, 0, s>>>(
            static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(mean),
            static_cast<const T*>(rstd), static_cast<T*>(grad_gamma), static_cast<T*>(grad_beta), rows, n);
      }
    });
    TESSERA_CHECK_LAUNCH();
  }
};

}  // namespace

Compute& cuda_compute() {
  static CudaCompute compute;
  return compute;
}

}  // namespace tessera::detail
