#pragma once
// Private to the CUDA kernels: launch geometry for the row kernels (norms, softmax,
// cross-entropy), which give each row of a [rows, n] array one block and reduce it with
// block_sum / block_max (cuda_reduce.cuh).

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::detail {

// for (r over [0, rows)) with one block per row, striding when there are more rows than
// the grid holds.
#define TESSERA_BLOCK_ROWS(r, rows) for (std::int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// One block per row, up to the grid's limit (TESSERA_BLOCK_ROWS covers the rest).
inline unsigned row_grid(std::int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

}  // namespace tessera::detail
