#ifndef TESSERA_TESTS_CAPI_CHECK_H
#define TESSERA_TESTS_CAPI_CHECK_H
/*
 * The C C-API tests' check (C11; the C++ tests have capi_check.hpp): CHECK(cond, format, ...)
 * counts a failed condition in `failures` and prints the rank, file:line, the printf-style
 * message and tessera_last_error(). main() sums `failures` over the ranks and exits
 * non-zero when any rank failed. One translation unit per test, hence the statics.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>

#include <tessera/tessera.h>

static int failures = 0;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void capi_check_failed(const char* file, int line, const char* format, ...) {
  /* The rank from MPI itself, so that a check before MPI_Init or after MPI_Finalize still reports (as -1). */
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "[rank %d] FAILED %s:%d: ", rank, file, line);
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fprintf(stderr, "; last error: %s\n", tessera_last_error());
  ++failures;
}

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) capi_check_failed(__FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)

#endif /* TESSERA_TESTS_CAPI_CHECK_H */
