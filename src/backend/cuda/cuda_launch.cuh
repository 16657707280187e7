#pragma once
// Private to the CUDA kernels: what every kernel file shares — the grid-stride loop,
// the f32/f64 dtype dispatch and typed launch, and the two-pass reduction to one double.

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_runtime.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

// for (i over [0, count)) in grid-stride form: any grid covers any count.
#define TESSERA_GRID_STRIDE(i, count)                                                                   \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// Calls f(T{}) with T = float or double after `dtype`; other dtypes are a ShapeError
// naming the kernel.
template <class F>
decltype(auto) float_dispatch(DType dtype, const char* what, F&& f) {
  if (dtype == DType::f32) return f(float{});
  if (dtype == DType::f64) return f(double{});
  throw ShapeError(std::string("cuda ") + what + ": dtype " + std::string(dtype_name(dtype)) + " is not f32 or f64");
}

// A kernel launch templated on the element type: on `device`'s compute stream, calls
// launch(T{}, stream) with T after `dtype` (float_dispatch), then checks the launch.
template <class Launch>
void launch_typed(DType dtype, const char* what, int device, Launch&& launch) {
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(guard.device());
  float_dispatch(dtype, what, [&](auto tag) { launch(tag, stream); });
  TESSERA_CHECK_LAUNCH();
}

// The second pass of a reduction whose first pass left one double per block in
// partials[0, blocks): adds them in one block in a fixed order (deterministic), and
// returns the sum to the host (synchronising `stream`). partials[blocks] is scratch.
double sum_partials(double* partials, unsigned blocks, cudaStream_t stream);

// A two-pass reduction of `count` elements on `device` to one double on the host:
// first_pass(blocks, partials, stream) launches, on the device's compute stream, a
// kernel of `blocks` blocks (grid_for(count)) that leaves one double per block in
// partials[0, blocks); sum_partials adds them. No elements sum to 0 with no launch.
template <class FirstPass>
double two_pass_sum(std::int64_t count, int device, FirstPass&& first_pass) {
  if (count == 0) return 0.0;
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(guard.device());
  const unsigned blocks = grid_for(count);
  DeviceScratch scratch((blocks + 1) * sizeof(double), guard.device());
  double* partials = scratch.as<double>();
  first_pass(blocks, partials, stream);
  TESSERA_CHECK_LAUNCH();
  return sum_partials(partials, blocks, stream);
}

}  // namespace tessera::detail
