#pragma once
// Private: completing several MPI requests under a communicator's wait policy, and the
// plan-consistency check shared by Decomposition and HaloExchange.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/wait_policy.hpp"

namespace tessera::domain::detail {

// spin: MPI_Waitall. sleep: MPI_Testall + a short sleep between polls, so ranks of an
// oversubscribed node leave the cores to the ranks with work (the same rule as
// tessera::detail::wait_request, for a set of requests). Throws MpiError.
void wait_all(std::vector<MPI_Request>& requests, WaitPolicy policy);

// Throws InvalidArgument(what + ...) on every rank unless every rank of `comm` passed the
// same `description`. One small all-reduce; used once per plan, never per exchange.
void check_same_on_all_ranks(MPI_Comm comm, const std::string& description, const std::string& what);

}  // namespace tessera::domain::detail
