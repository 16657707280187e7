// Library versions of the CUDA build, and the throw functions behind the CUDA, cuBLAS
// and NCCL check macros. Compiled by the C++ compiler (no kernels here) with the CUDA
// runtime, cuBLAS and NCCL linked; every function below works without a GPU, which is
// what lets the check macros be tested on a machine that has none.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#if defined(TESSERA_WITH_NCCL)
#include <nccl.h>
#endif

#include <string>

#include "backend/cuda/cuda_check.hpp"
#if defined(TESSERA_WITH_NCCL)
#include "comm/nccl_check.hpp"
#endif
#include "backend/cuda_plugin.hpp"
#include "tessera/error.hpp"

namespace tessera {
namespace detail {
namespace {

std::string or_unknown(const char* text) { return text != nullptr ? text : "unknown"; }

// "<name> (<code>): <text>", the shape shared by all three vendors' details.
std::string vendor_detail(const std::string& name, int status, const std::string& text) {
  return name + " (" + std::to_string(status) + "): " + text;
}

#if defined(TESSERA_WITH_NCCL)
// NCCL has no ncclGetErrorName; spell the enumerators so a message can be grepped for
// the same name the NCCL documentation uses.
const char* nccl_result_name(int status) {
  switch (status) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult";
  }
}
#endif

}  // namespace

void throw_cuda_error(int status, const char* expr, const char* file, int line) {
  const auto error = static_cast<cudaError_t>(status);
  // The runtime also records a failed call as its "last error". This exception reports
  // it, so clear it: otherwise the next kernel launch check (cudaGetLastError) would
  // report this stale failure against an innocent launch. Sticky errors (a corrupted
  // context) are not cleared by this and keep failing every later call, as they should.
  (void)cudaGetLastError();
  throw CudaError(describe_failed_call(
      expr, file, line,
      vendor_detail(or_unknown(cudaGetErrorName(error)), status,
                    or_unknown(cudaGetErrorString(error)))));
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  const auto error = static_cast<cublasStatus_t>(status);
  throw CublasError(describe_failed_call(
      expr, file, line,
      vendor_detail(or_unknown(cublasGetStatusName(error)), status,
                    or_unknown(cublasGetStatusString(error)))));
}

#if defined(TESSERA_WITH_NCCL)
void throw_nccl_error(int status, const char* expr, const char* file, int line) {
  const auto error = static_cast<ncclResult_t>(status);
  throw NcclError(describe_failed_call(
      expr, file, line,
      vendor_detail(nccl_result_name(status), status, or_unknown(ncclGetErrorString(error)))));
}
#endif

}  // namespace detail

namespace {

// CUDA encodes versions as 1000 * major + 10 * minor (13000 is 13.0).
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string runtime_version() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unavailable";
  }
  return cuda_version_text(version);
}

// The driver is absent on build machines without a GPU; that is not an error here.
std::string driver_version() {
  int version = 0;
  const cudaError_t status = cudaDriverGetVersion(&version);
  if (status != cudaSuccess || version == 0) {
    (void)cudaGetLastError();
    return "driver unavailable";
  }
  return "driver " + cuda_version_text(version);
}

// cublasGetProperty reads the library's own constants: no handle, no GPU needed.
std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return "unavailable";
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string nccl_version() {
#if defined(TESSERA_WITH_NCCL)
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unavailable";
  // NCCL >= 2.9 encodes 10000 * major + 100 * minor + patch; older releases used
  // 1000 * major + 100 * minor + patch.
  const int major_unit = code >= 20900 ? 10000 : 1000;
  return std::to_string(code / major_unit) + "." + std::to_string(code % major_unit / 100) +
         "." + std::to_string(code % 100);
#else
  return "not used (built without NCCL)";
#endif
}

}  // namespace

std::string detail::cuda_runtime_library_versions() {
  try {
    return "CUDA runtime " + runtime_version() + ", " + driver_version() + ", cuBLAS " +
           cublas_version() + ", NCCL " + nccl_version();
  } catch (...) {
    // Only std::bad_alloc can get here; this string is context for reports, never
    // worth an exception of its own.
    return "CUDA library versions unavailable";
  }
}

}  // namespace tessera
