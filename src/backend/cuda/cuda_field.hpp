#pragma once
// Private to src/backend/cuda: the field entries of cuda_field.cu (same contracts as the
// Compute methods of the same names, backend/compute.hpp).

#include <cstdint>

#include "backend/compute.hpp"

namespace tessera::detail {

double cuda_weighted_squared_error(DType dtype, const void* prediction, const void* target, const double* row_weights,
                                   std::int64_t planes, std::int64_t rows, std::int64_t cols, double grad_scale,
                                   void* grad, int device);
void cuda_channel_affine(DType dtype, void* x, const double* scale, const double* shift, std::int64_t outer,
                         std::int64_t channels, std::int64_t inner, int device);

}  // namespace tessera::detail
