#pragma once
// Private to src/backend/cuda: two functions of cuda_blas.cu that other CUDA files call.
// cuda_gemm is Compute::gemm without the round_to_bf16 copies (attention's per-head
// GEMMs call it); cuda_scale is Compute::scale for f32/f64 (CudaCompute::scale, in
// cuda_optim.cu, adds bf16).

#include <cstdint>

#include "backend/compute.hpp"

namespace tessera::detail {

void cuda_gemm(const GemmArgs& args, int device);
void cuda_scale(DType dtype, std::int64_t n, double alpha, void* y, int device);

}  // namespace tessera::detail
