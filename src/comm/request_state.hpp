#pragma once
// Private: what a pending CommRequest holds, and the wait loop of the wait policy.

#include <mpi.h>

#include <functional>
#include <vector>

#include "comm/flight_recorder.hpp"
#include "comm/watchdog.hpp"
#include "tessera/comm.hpp"

namespace tessera {

struct CommRequest::State {
  MPI_Request request = MPI_REQUEST_NULL;
  WaitOptions wait;               // resolved: spin or sleep
  std::function<void()> finish;   // post-processing once MPI is done (avg, copy back)
  // A queued NCCL message: whether it completed, asked once without blocking (test()
  // calls it before `finish`, the message's waiter, which then returns at once).
  std::function<bool()> ready;
  std::vector<Tensor> keep_alive; // buffers MPI reads or writes until completion
  bool complete = false;
  detail::WaitSite site;          // what the watchdog names if the wait never ends
  // The flight recorder's entry of this operation, completed with it (ring null: none).
  struct Flight {
    std::shared_ptr<detail::FlightRecorder> ring;
    std::uint64_t ticket = 0;
  } flight;
};

namespace detail {

// Completes `request` under `wait` (spin: MPI_Wait; sleep: MPI_Test + sleep).
// Throws MpiError on failure. With a collective timeout set (wait_policy.hpp), both
// policies test in a loop and a wait longer than the timeout ends in watchdog_abort,
// which names `site`.
void wait_request(MPI_Request& request, const WaitOptions& wait, const WaitSite& site = {});
// The same for a set of requests (spin: MPI_Waitall; sleep: MPI_Testall + sleep): the
// one wait loop of the library, used by the halo exchange and the decomposition too.
void wait_all(std::vector<MPI_Request>& requests, const WaitOptions& wait, const WaitSite& site = {});

}  // namespace detail
}  // namespace tessera
