#pragma once
// Dense linear-algebra building blocks every layer uses, dispatched on the tensors'
// device: OpenBLAS (cblas) on the host; cuBLAS on CUDA (with the CUDA compute backend,
// until then a CUDA tensor here is an UnsupportedError naming the op).
//
// All tensors must be contiguous, of one floating dtype (f32 or f64) and on one device;
// violations are ShapeErrors naming the op and the tensors.

#include "tessera/precision.hpp"
#include "tessera/tensor.hpp"

namespace tessera::ops {

// C = alpha * op(A) * op(B) + beta * C for 2-D row-major tensors, op(X) = X or X^T.
// A and B: f32, f64 or bf16 (bf16 accumulates in fp32 into a bf16 or f32 C).
// Precision::bf16_mixed (precision.hpp): A and B are f32 or bf16, C is f32; f32
// operands are rounded to bf16 first, so the product is that of the bf16 operands,
// accumulated in fp32. On the host the bf16 GEMM is the BLAS's cblas_sbgemm where the
// loaded BLAS exports one, else the operands widened (exactly) to f32 and sgemm.
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0, Precision precision = Precision::fp32);
// op(A) * op(B) into a new tensor.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// A contiguous copy of x (f32, f64 or bf16) converted to `dtype` (f32, f64 or bf16; to
// bf16 rounds to nearest even, f64 through f32 as tessera::bfloat16 does, so twice).
// Same dtype: a copy.
Tensor cast(const Tensor& x, DType dtype);

// y += alpha * x (same shape).
void axpy(double alpha, const Tensor& x, Tensor& y);
// y *= alpha.
void scale(Tensor& y, double alpha);

// y[..., c, ...] += bias[c] along `channel_dim` of y (-1: the last dim, as in Linear;
// 1: NCHW channels, as in Conv2d).
void add_bias(Tensor& y, const Tensor& bias, int channel_dim = -1);
// grad_bias[c] += sum of dy over every dim but `channel_dim`.
void accumulate_bias_grad(const Tensor& dy, Tensor& grad_bias, int channel_dim = -1);

// Reductions, accumulated in double.
double sum(const Tensor& x);
double dot(const Tensor& x, const Tensor& y);

// ---- Host threading (OpenBLAS). OpenBLAS starts a thread per core in every process:
// with several ranks on a node, give each rank its share of the cores, or every GEMM
// is oversubscribed.
void set_host_threads(int threads);  // InvalidArgument when threads < 1
int host_threads() noexcept;
// max(1, usable_cores / ranks_on_node): a rank's share of its node's cores.
int host_thread_share(int usable_cores, int ranks_on_node) noexcept;

}  // namespace tessera::ops
