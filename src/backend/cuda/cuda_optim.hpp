#pragma once
// Private to src/backend/cuda: the reduction, cast and optimizer entries of
// cuda_optim.cu, which the Compute implementation in cuda_kernels.cu forwards to. Same
// contracts as the Compute methods of the same names (backend/compute.hpp).

#include <cstdint>

#include "backend/compute.hpp"

namespace tessera::detail {

double cuda_sum_squares(DType dtype, const void* x, std::int64_t n, int device);
void cuda_scale_bf16(std::int64_t n, double alpha, void* y, int device);
void cuda_cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, int device);
void cuda_sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                     const SgdStep& step, int device);
void cuda_adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg, void* exp_avg_sq,
                       const AdamWStep& step, int device);

}  // namespace tessera::detail
