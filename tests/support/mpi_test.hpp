#pragma once
// Helpers for tests that run under mpiexec with tests/support/mpi_test_main.cpp.

#include <mpi.h>

#include <string>
#include <vector>

namespace tessera::testing {

// This process's rank in, and the size of, MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Every rank's string, gathered onto every rank (rank order).
std::vector<std::string> all_gather_strings(const std::string& mine, MPI_Comm comm = MPI_COMM_WORLD);

// True on every rank iff `value` is true on every rank of `comm`.
bool all_ranks(bool value, MPI_Comm comm = MPI_COMM_WORLD);

// A fresh, empty directory "scratch_<name>_np<ranks>" in the test's working directory (the
// build tree, one folder per test suite), made by rank 0 of MPI_COMM_WORLD and visible
// to every rank on return.
std::string scratch_dir(const std::string& name);

}  // namespace tessera::testing
