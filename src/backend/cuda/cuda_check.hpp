#pragma once
// Private: check macros for the CUDA runtime and cuBLAS. Like every tessera check they
// evaluate their argument exactly once and are never compiled out (a failed cudaMalloc
// in a production run must still be reported, with the call that failed).
//
//   TESSERA_CHECK_CUDA(call)    throw CudaError   naming the call and the runtime's error
//   TESSERA_CHECK_CUBLAS(call)  throw CublasError naming the call and cuBLAS's status
//
// Only code under src/backend (and tests of it) may include this header: it pulls in
// the vendor headers, which the layering keeps out of every other folder
// (docs/architecture.md, "Floors and folders").

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "tessera/check.hpp"

namespace tessera::detail {

// `status` is a cudaError_t / cublasStatus_t. The message is built by
// describe_failed_call and carries the vendor's error name, text and numeric code.
// Defined in cuda_library_info.cpp.
[[noreturn]] void throw_cuda_error(int status, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);

}  // namespace tessera::detail

#define TESSERA_CHECK_CUDA(expr) \
  TESSERA_CHECK_STATUS(expr, #expr, cudaSuccess, ::tessera::detail::throw_cuda_error)

#define TESSERA_CHECK_CUBLAS(expr) \
  TESSERA_CHECK_STATUS(expr, #expr, CUBLAS_STATUS_SUCCESS, ::tessera::detail::throw_cublas_error)
