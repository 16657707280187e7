#pragma once
// Collective agreement on failure. tessera's rule: a collective operation either
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
#include <string>
#include <string_view>

namespace tessera {

void agree_on_success(MPI_Comm comm, const std::function<void()>& step);

// Plan-time consistency: true on every rank iff every rank of `comm` passed the same
// `description` (compared through a 64-bit hash of it; one small all-reduce, sleep-
// polled). Ranks that disagree on what they are about to do collectively (a config, the
// tensors of a checkpoint, the fields of a halo plan) would otherwise hang later.
bool same_on_all_ranks(MPI_Comm comm, std::string_view description);
// The same, throwing InvalidArgument(message) on every rank when they disagree.
void require_same_on_all_ranks(MPI_Comm comm, std::string_view description, const std::string& message);

}  // namespace tessera
