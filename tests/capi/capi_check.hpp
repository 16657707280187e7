#pragma once
// What the C++ C-API tests share: the check (a failed condition is counted and printed
// with its rank, line and tessera_last_error(); main() exits non-zero when `failures` > 0;
// no gtest: these programs call the C API the way a C caller does), and their MPI
// start-up with a scratch directory per rank count and their end.

#include <mpi.h>

#include <cstdio>
#include <string>

#include "tessera/tessera.h"

namespace capi_test {

inline int failures = 0;
inline int world_rank = 0;
inline int world_size = 1;

inline void check(bool ok, const char* what, int line) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] line %d: %s failed; last error: %s\n", world_rank, line, what,
                 tessera_last_error());
  }
}

// MPI_Init, world_rank and world_size; returns the directory of this run's files,
// argv[1] (default ".") + "/<name>_np<world size>": one per rank count, since the tests
// of one program at several rank counts may run at the same time.
inline std::string init_mpi(int& argc, char**& argv, const std::string& name) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  return std::string(argc > 1 ? argv[1] : ".") + "/" + name + "_np" + std::to_string(world_size);
}

// The failed checks summed over MPI_COMM_WORLD, reported by rank 0 as
// "<program>: <n> ranks, <k> failed checks"; MPI_Finalize. Returns main()'s exit status.
inline int finish(const char* program) {
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf("%s: %d ranks, %d failed checks\n", program, world_size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

}  // namespace capi_test

#define CHECK(cond) capi_test::check((cond), #cond, __LINE__)
#define EXPECT_STATUS(call, code) capi_test::check((call) == (code), #call " == " #code, __LINE__)
