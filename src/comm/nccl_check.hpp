#pragma once
// Private: check macro for NCCL calls. Evaluates its argument exactly once and is never
// compiled out, like every tessera check.
//
//   TESSERA_CHECK_NCCL(call)  throw NcclError naming the call and NCCL's error text
//
// Only code under src/comm and src/backend (and tests of it) may include this header:
// it pulls in nccl.h, which the layering keeps out of every other folder
// (docs/architecture.md, "Floors and folders").

#include <nccl.h>

#include "tessera/check.hpp"

namespace tessera::detail {

// `status` is an ncclResult_t. The message is built by describe_failed_call and carries
// the result's name, NCCL's text and the numeric code. Defined in
// src/backend/cuda/cuda_library_info.cpp, the translation unit that links NCCL.
[[noreturn]] void throw_nccl_error(int status, const char* expr, const char* file, int line);

}  // namespace tessera::detail

#define TESSERA_CHECK_NCCL(expr) \
  TESSERA_CHECK_STATUS(expr, #expr, ncclSuccess, ::tessera::detail::throw_nccl_error)
