#pragma once
// Check macros. Each evaluates its argument exactly once and is never compiled out
// (NDEBUG has no effect): a failed MPI call in production must still be reported.
//
//   TESSERA_CHECK(cond, ErrorType, message)   throw ErrorType(message) when !cond
//   TESSERA_CHECK_MPI(call)                   throw MpiError naming the call and MPI's text
//
// Backend-specific macros live beside the code that includes the vendor header
// (the layering rule: nothing outside src/backend and src/comm includes CUDA/NCCL headers):
//   TESSERA_CHECK_CUDA, TESSERA_CHECK_CUBLAS  src/backend/cuda/cuda_check.hpp
//   TESSERA_CHECK_NCCL                        src/comm/nccl_check.hpp
//   TESSERA_CHECK_HDF5                        src/io/hdf5_check.hpp (an expression that
//                                             returns the hid_t/herr_t it checked)
// The status-code macros are built on TESSERA_CHECK_STATUS below.

#include <string>

#include "tessera/error.hpp"

namespace tessera::detail {

// "file.cpp:123: `expr` failed: detail"
std::string describe_failed_call(const char* expr, const char* file, int line,
                                 const std::string& detail);

[[noreturn]] void throw_mpi_error(int status, const char* expr, const char* file, int line);

}  // namespace tessera::detail

#define TESSERA_CHECK(cond, ErrorType, message) \
  do {                                          \
    if (!(cond)) throw ErrorType(message);      \
  } while (0)

// Evaluates `expr` once into a local; calls `thrower(status, text, __FILE__, __LINE__)`
// unless `status == ok_value`. `thrower` must be [[noreturn]]. Wrapper macros pass
// `#expr` as `text` themselves, so the message shows the call as written (macros such
// as cuBLAS's `cublasSgemm` -> `cublasSgemm_v2` are not expanded in it).
#define TESSERA_CHECK_STATUS(expr, text, ok_value, thrower)                    \
  do {                                                                         \
    const auto tessera_status_ = (expr);                                       \
    if (tessera_status_ != (ok_value))                                         \
      thrower(static_cast<int>(tessera_status_), text, __FILE__, __LINE__);    \
  } while (0)

#define TESSERA_CHECK_MPI(expr) \
  TESSERA_CHECK_STATUS(expr, #expr, MPI_SUCCESS, ::tessera::detail::throw_mpi_error)
