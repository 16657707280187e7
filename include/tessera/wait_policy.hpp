#pragma once
// How a rank waits for an MPI collective to complete.
//
// MPICH busy-polls inside blocking calls. When a node holds more ranks than cores,
// the pollers starve the ranks doing real work: a small MPI_Allreduce measured 11 ms
// at 4 ranks and 50 ms at 8 ranks on a 2-core node, against 0.3 ms and 0.5 ms when
// each rank posts a non-blocking call and sleeps ~20 us between MPI_Test calls.
//
//   spin   plain blocking MPI calls (lowest latency with a core per rank)
//   sleep  non-blocking call + MPI_Test + short sleep (oversubscribed nodes)
//   auto   sleep when the node holds more ranks than usable cores, otherwise spin;
//          the environment variable TESSERA_WAIT_POLICY=spin|sleep|auto decides
//          instead when it is set.

#include <chrono>
#include <string_view>

namespace tessera {

enum class WaitPolicy { spin, sleep, automatic };

std::string_view wait_policy_name(WaitPolicy policy) noexcept;  // "spin" "sleep" "auto"
// Parses "spin" | "sleep" | "auto"; throws ConfigError naming `what` and the value.
WaitPolicy parse_wait_policy(std::string_view text, std::string_view what);

struct WaitOptions {
  WaitPolicy policy = WaitPolicy::automatic;
  // Sleep between MPI_Test calls under `sleep`; TESSERA_WAIT_SLEEP_US overrides it.
  std::chrono::microseconds sleep_interval{20};
};

// The auto rule itself, a pure function so it is testable: sleep when
// ranks_on_node > usable_cores.
WaitPolicy auto_wait_policy(int ranks_on_node, int usable_cores) noexcept;

// Resolves `requested` to spin or sleep. `automatic` consults TESSERA_WAIT_POLICY,
// then the auto rule with the given node facts. An invalid TESSERA_WAIT_POLICY throws
// ConfigError naming the variable.
WaitPolicy resolve_wait_policy(WaitPolicy requested, int ranks_on_node, int usable_cores);

// The sleep interval after applying TESSERA_WAIT_SLEEP_US (microseconds, 0..100000).
std::chrono::microseconds resolve_sleep_interval(std::chrono::microseconds requested);

// The collective watchdog. With a timeout set, a rank that waits longer than it for any
// MPI completion (a collective, a halo message, a barrier) prints which operation, on
// which communicator, which ranks of it have not reached the same call (for the
// Communicator's collectives), and aborts the job (MPI_Abort, exit code 3) instead of
// hanging forever. The timeout is set_collective_timeout's value when one was set, else
// the environment variable TESSERA_COLLECTIVE_TIMEOUT (seconds, > 0; 0 or unset: none).
// It must be the same on every rank, and set before the communicators are created:
// a Communicator made while a timeout is set keeps the call counters the report reads.
double collective_timeout();  // seconds; 0 = no watchdog. ConfigError for a bad variable
void set_collective_timeout(double seconds);  // InvalidArgument for < 0 or non-finite

}  // namespace tessera
