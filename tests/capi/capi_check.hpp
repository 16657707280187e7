#pragma once
// The C++ C-API tests' check: a failed condition is counted and printed with its rank,
// line and tessera_last_error(); main() exits non-zero when `failures` > 0. (No gtest:
// these programs call the C API the way a C caller does.)

#include <cstdio>

#include "tessera/tessera.h"

namespace capi_test {

inline int failures = 0;
inline int world_rank = 0;

inline void check(bool ok, const char* what, int line) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] line %d: %s failed; last error: %s\n", world_rank, line, what,
                 tessera_last_error());
  }
}

}  // namespace capi_test

#define CHECK(cond) capi_test::check((cond), #cond, __LINE__)
#define EXPECT_STATUS(call, code) capi_test::check((call) == (code), #call " == " #code, __LINE__)
