// The CUDA, cuBLAS and NCCL check macros, the CUDA library report and the error a CUDA
// tensor request raises when no device can serve it. None of this needs a GPU: the
// vendors' error-string functions work without one, so these tests pass (not skip) on
// a build machine.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <tessera/version.hpp>
#if TESSERA_HAVE_NCCL
#include <nccl.h>
#endif

#include <string>

#include "backend/cuda/cuda_check.hpp"
#if TESSERA_HAVE_NCCL
#include "comm/nccl_check.hpp"
#endif
#include "tessera/backend.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace {

// The test main links GoogleTest without GoogleMock, so no HasSubstr matcher.
::testing::AssertionResult Contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\"\ndoes not contain \"" << needle
                                       << "\"";
}

// Returns `status` and counts the calls, to prove each macro evaluates its argument
// exactly once (on success and on failure alike).
int g_calls = 0;
template <class Status>
Status counted(Status status) {
  ++g_calls;
  return status;
}

std::string location(int line) { return "test_cuda_checks.cpp:" + std::to_string(line); }

TEST(CudaCheck, SuccessDoesNothingAndEvaluatesOnce) {
  g_calls = 0;
  EXPECT_NO_THROW(TESSERA_CHECK_CUDA(counted(cudaSuccess)));
  EXPECT_EQ(g_calls, 1);
}

TEST(CudaCheck, FailureThrowsCudaErrorWithCallNameTextAndLocation) {
  g_calls = 0;
  int line = 0;
  try {
    line = __LINE__ + 1;
    TESSERA_CHECK_CUDA(counted(cudaErrorMemoryAllocation));
    FAIL() << "TESSERA_CHECK_CUDA did not throw";
  } catch (const tessera::CudaError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), tessera::ErrorCode::cuda);
    EXPECT_TRUE(Contains(message, "counted(cudaErrorMemoryAllocation)"));
    EXPECT_TRUE(Contains(message, "cudaErrorMemoryAllocation"));
    EXPECT_TRUE(Contains(message, cudaGetErrorString(cudaErrorMemoryAllocation)));
    EXPECT_TRUE(Contains(message, "(" + std::to_string(static_cast<int>(cudaErrorMemoryAllocation)) + ")"));
    EXPECT_TRUE(Contains(message, location(line)));
  }
  EXPECT_EQ(g_calls, 1);
}

TEST(CudaCheck, FailureIsCatchableAsTesseraError) {
  EXPECT_THROW(TESSERA_CHECK_CUDA(cudaErrorInvalidValue), tessera::Error);
}

TEST(CudaCheck, FailureDoesNotLingerAsTheRuntimesLastError) {
  // A real failing runtime call, reported by the macro: it must not be reported again
  // by the next cudaGetLastError (which checks every kernel launch). Without a driver
  // every call fails with the same initialisation error, which the runtime never
  // clears, so there is nothing to observe.
  if (tessera::cuda_device_count() == 0) GTEST_SKIP() << tessera::cuda_unavailable_reason();
  EXPECT_THROW(TESSERA_CHECK_CUDA(cudaSetDevice(-1)), tessera::CudaError);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaCheck, MacroIsOneStatement) {
  // Would not compile (dangling else) if the macro were not a single statement.
  g_calls = 0;
  if (g_calls == 0)
    TESSERA_CHECK_CUDA(counted(cudaSuccess));
  else
    TESSERA_CHECK_CUDA(counted(cudaErrorInvalidValue));
  EXPECT_EQ(g_calls, 1);
}

TEST(CublasCheck, SuccessDoesNothingAndEvaluatesOnce) {
  g_calls = 0;
  EXPECT_NO_THROW(TESSERA_CHECK_CUBLAS(counted(CUBLAS_STATUS_SUCCESS)));
  EXPECT_EQ(g_calls, 1);
}

TEST(CublasCheck, FailureThrowsCublasErrorWithCallNameTextAndLocation) {
  g_calls = 0;
  int line = 0;
  try {
    line = __LINE__ + 1;
    TESSERA_CHECK_CUBLAS(counted(CUBLAS_STATUS_NOT_INITIALIZED));
    FAIL() << "TESSERA_CHECK_CUBLAS did not throw";
  } catch (const tessera::CublasError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), tessera::ErrorCode::cublas);
    EXPECT_TRUE(Contains(message, "counted(CUBLAS_STATUS_NOT_INITIALIZED)"));
    EXPECT_TRUE(Contains(message, cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED)));
    EXPECT_TRUE(Contains(message, cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)));
    EXPECT_TRUE(Contains(message, "(" + std::to_string(static_cast<int>(CUBLAS_STATUS_NOT_INITIALIZED)) + ")"));
    EXPECT_TRUE(Contains(message, location(line)));
  }
  EXPECT_EQ(g_calls, 1);
}

TEST(CublasCheck, RealCallWithNullHandleThrows) {
  // cublasCreate needs a GPU, but argument checks do not: a null handle is rejected.
  try {
    TESSERA_CHECK_CUBLAS(cublasSetPointerMode(nullptr, CUBLAS_POINTER_MODE_HOST));
    FAIL() << "no throw";
  } catch (const tessera::CublasError& e) {
    // The call is named as written, not as cuBLAS's macro expands it (..._v2).
    EXPECT_TRUE(Contains(e.what(), "`cublasSetPointerMode(nullptr, CUBLAS_POINTER_MODE_HOST)`")) << e.what();
  }
}

#if TESSERA_HAVE_NCCL  // a build without NCCL has no NCCL check to test
TEST(NcclCheck, SuccessDoesNothingAndEvaluatesOnce) {
  g_calls = 0;
  EXPECT_NO_THROW(TESSERA_CHECK_NCCL(counted(ncclSuccess)));
  EXPECT_EQ(g_calls, 1);
}

TEST(NcclCheck, FailureThrowsNcclErrorWithCallNameTextAndLocation) {
  g_calls = 0;
  int line = 0;
  try {
    line = __LINE__ + 1;
    TESSERA_CHECK_NCCL(counted(ncclInvalidArgument));
    FAIL() << "TESSERA_CHECK_NCCL did not throw";
  } catch (const tessera::NcclError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), tessera::ErrorCode::nccl);
    EXPECT_TRUE(Contains(message, "counted(ncclInvalidArgument)"));
    EXPECT_TRUE(Contains(message, "ncclInvalidArgument"));
    EXPECT_TRUE(Contains(message, ncclGetErrorString(ncclInvalidArgument)));
    EXPECT_TRUE(Contains(message, "(" + std::to_string(static_cast<int>(ncclInvalidArgument)) + ")"));
    EXPECT_TRUE(Contains(message, location(line)));
  }
  EXPECT_EQ(g_calls, 1);
}

TEST(NcclCheck, RealCallWithNullArgumentThrows) {
  EXPECT_THROW(TESSERA_CHECK_NCCL(ncclGetVersion(nullptr)), tessera::NcclError);
}
#endif

TEST(CudaLibrary, BuiltAndConsistentAboutDevices) {
  EXPECT_TRUE(tessera::cuda_backend_built());
  const int count = tessera::cuda_device_count();
  EXPECT_GE(count, 0);
  const std::string reason = tessera::cuda_unavailable_reason();
  if (count == 0) {
    EXPECT_TRUE(Contains(reason, "cudaGetDeviceCount"));
  } else {
    EXPECT_EQ(reason, "");
  }
  EXPECT_EQ(tessera::backend_for(tessera::DeviceType::cuda).type(), tessera::DeviceType::cuda);
  EXPECT_EQ(tessera::backend_for(tessera::Device::cuda(0)).name(), "cuda");
}

TEST(CudaLibrary, VersionsNameTheLibrariesThisBuildLinks) {
  const std::string versions = tessera::cuda_library_versions();
  // Header and library come from the same toolkit install, so their versions agree.
  EXPECT_TRUE(Contains(versions, "CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + "." +
                                  std::to_string(CUDART_VERSION % 1000 / 10)));
  EXPECT_TRUE(Contains(versions, "cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "." +
                                  std::to_string(CUBLAS_VER_MINOR) + "." +
                                  std::to_string(CUBLAS_VER_PATCH)));
#if TESSERA_HAVE_NCCL
  EXPECT_TRUE(Contains(versions, "NCCL " + std::to_string(NCCL_MAJOR) + "." +
                                  std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH)));
#else
  EXPECT_TRUE(Contains(versions, "NCCL not used (built without NCCL)"));
#endif
  EXPECT_TRUE(Contains(versions, "driver"));
}

// cuda:<count> never exists: without a GPU that is cuda:0, the common mistake of
// running a CUDA configuration on a login or build node.
TEST(CudaTensor, RequestOnAMissingDeviceThrowsCudaErrorNamingIt) {
  const int count = tessera::cuda_device_count();
  const std::string requested = "cuda:" + std::to_string(count);
  try {
    (void)tessera::Tensor::empty({4}, tessera::DType::f32, tessera::Device::cuda(count));
    FAIL() << "allocating on " << requested << " did not throw";
  } catch (const tessera::CudaError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(Contains(message, requested));
    if (count == 0) {
      EXPECT_TRUE(Contains(message, "no CUDA device is visible"));
      EXPECT_TRUE(Contains(message, tessera::cuda_unavailable_reason()));
    } else {
      EXPECT_TRUE(Contains(message, std::to_string(count) + " CUDA device(s)"));
    }
  }
}

TEST(CudaTensor, BackendCallsLeaveTheCallersCurrentDeviceAlone) {
  const int count = tessera::cuda_device_count();
  if (count < 2) GTEST_SKIP() << "needs two CUDA devices; " << count << " visible";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  tessera::Tensor t = tessera::Tensor::zeros({16}, tessera::DType::f32, tessera::Device::cuda(0));
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
