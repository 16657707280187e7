// CudaCompute, rotary position embeddings: one thread per rotated pair, with the
// rope_math.hpp functions the host loop runs (host twin: host_rope.cpp), in double and
// rounded once to the dtype.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/rope_math.hpp"

namespace tessera::detail {
namespace {

// Pair p of the flattened [batch * seq, width / 2] pairs: row r = p / (width / 2) is at
// position r % seq; its pair index inside the head is (p % (width / 2)) % (head_dim / 2).
template <class T>
__global__ void rope_kernel(const T* x, T* y, std::int64_t rows, std::int64_t seq, std::int64_t width,
                            std::int64_t head_dim, double theta, bool inverse) {
  const std::int64_t row_pairs = width / 2, head_pairs = head_dim / 2;
  TESSERA_GRID_STRIDE(p, rows * row_pairs) {
    const std::int64_t r = p / row_pairs;
    const std::int64_t e = 2 * p;  // element (r, 2 * (p % row_pairs))
    const double angle = rope_angle(r % seq, (p % row_pairs) % head_pairs, head_dim, theta);
    double y0, y1;
    rope_rotate(static_cast<double>(x[e]), static_cast<double>(x[e + 1]), angle, inverse, y0, y1);
    y[e] = static_cast<T>(y0);
    y[e + 1] = static_cast<T>(y1);
  }
}

}  // namespace

void CudaCompute::rope(DType dtype, const void* x, void* out, const RopeShape& shape, bool inverse, int device) {
  const std::int64_t rows = shape.batch * shape.seq;
  const std::int64_t pairs = rows * (shape.width / 2);
  if (pairs == 0) return;
  launch_typed(dtype, "rope", device, [&](auto tag, cudaStream_t s) {
    using T = decltype(tag);
    rope_kernel<T><<<grid_for(pairs), kThreadsPerBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(out), rows,
                                                                shape.seq, shape.width, shape.head_dim, shape.theta,
                                                                inverse);
  });
}

}  // namespace tessera::detail
