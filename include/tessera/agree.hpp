#pragma once
// Collective agreement on failure. DESIGN's rule: a collective operation either
// succeeds on every rank or throws the same error on every rank; no rank may be left
// waiting in a collective that another rank abandoned.
//
// agree_on_success(comm, step) runs `step` locally, then all ranks learn whether any
// rank failed. If one did, every rank throws the error of the lowest failing rank (same
// ErrorCode, same message, suffixed with "(on rank R of N)"). Use it around local work
// that may fail on some ranks only (opening a file, choosing a device) before the ranks
// go on into a collective that depends on it.

#include <mpi.h>

#include <functional>

namespace tessera {

void agree_on_success(MPI_Comm comm, const std::function<void()>& step);

}  // namespace tessera
