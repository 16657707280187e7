// CudaCompute, initialisation (host twin: host_init.cpp): every element draws from the
// Philox block of its global index, so a block of a sharded tensor holds exactly the
// values of the same elements of the serial tensor, on either backend.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_compute.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_runtime.hpp"
#include "backend/kernel_math.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/philox.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

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

}  // namespace

void CudaCompute::init_uniform(DType dtype, void* local_data, const StridedLayout& local,
                               const std::int64_t* offset, const std::int64_t* global_strides, std::uint64_t key,
                               double a, double b, bool constant, int device) {
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
      init_uniform_kernel<double><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<double*>(local_data), local, index,
                                                                    key, a, b, constant, count);
      break;
    case DType::bf16:
      init_uniform_kernel<bfloat16><<<grid, kThreadsPerBlock, 0, s>>>(static_cast<bfloat16*>(local_data), local,
                                                                      index, key, a, b, constant, count);
      break;
    default: throw ShapeError("cuda init_uniform: dtype must be f32, f64 or bf16");
  }
  TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera::detail
