#pragma once
// Helpers for tests that run under mpiexec with tests/support/mpi_test_main.cpp.

#include <mpi.h>

#include <string>
#include <vector>

namespace tessera::testing {

int world_rank();
int world_size();

// Every rank's string, gathered onto every rank (rank order).
std::vector<std::string> all_gather_strings(const std::string& mine, MPI_Comm comm = MPI_COMM_WORLD);

// True on every rank iff `value` is true on every rank of `comm`.
bool all_ranks(bool value, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace tessera::testing
