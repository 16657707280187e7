#pragma once
// Private to src/backend/cuda: the BLAS-like entries of cuda_blas.cu, which
// CudaCompute (cuda_compute.hpp) forwards to. Same contracts as the
// Compute methods of the same names.

#include <cstdint>

#include "backend/compute.hpp"

namespace tessera::detail {

void cuda_gemm(const GemmArgs& args, int device);
void cuda_axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y, int device);
void cuda_scale(DType dtype, std::int64_t n, double alpha, void* y, int device);
void cuda_add_bias(DType dtype, void* y, const void* bias, std::int64_t outer, std::int64_t channels,
                   std::int64_t inner, int device);
void cuda_accumulate_bias_grad(DType dtype, const void* dy, void* grad, std::int64_t outer, std::int64_t channels,
                               std::int64_t inner, int device);
double cuda_sum(DType dtype, const void* x, std::int64_t n, int device);
double cuda_dot(DType dtype, const void* x, const void* y, std::int64_t n, int device);

}  // namespace tessera::detail
