#pragma once
// What every tessera benchmark shares: MPI start-up, flags of its own beside Google
// Benchmark's, rank-0-only reporting, context (ranks, mesh, backend, MPI and NCCL
// versions, git hash, host threads), the world communicators of tessera and of its
// plain-MPI peer, and iteration timing as the maximum over ranks.
//
// Timing rule: every timed iteration is barrier -> time the operation -> MPI_Allreduce
// MAX of the elapsed time -> SetIterationTime. Every rank therefore reports the same
// time, and Google Benchmark makes the same iteration-count decisions on every rank
// (which it must: the operations are collectives).

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm.hpp"

namespace tessera::bench {

using Flags = std::map<std::string, std::string>;  // --name=value of the program's own flags

// Comma-separated integers ("1,2,4").
std::vector<long> int_list(const std::string& text, const std::string& flag);

// The field sizes of --lat and --lon, paired in order (ConfigError when the lists differ
// in length).
std::vector<std::pair<long, long>> lat_lon_sizes(const Flags& flags);

// The world as the communication benchmarks time it: tessera's communicator, and a
// duplicate of MPI_COMM_WORLD for the plain-MPI peer measured beside it (a context of its
// own, so that the peer's messages never match tessera's).
struct World {
  std::unique_ptr<Communicator> comm;
  MPI_Comm raw = MPI_COMM_NULL;

  // Creates both (tessera's with `wait`) and adds its wait policy to the context.
  void open(const WaitOptions& wait = {});
};

// The slowest rank's value.
double max_over_ranks(double seconds, MPI_Comm comm);

// The peer timed beside the operation in the same run, from the totals over the state's
// iterations: "<peer>_us", its mean time per iteration, and "vs_<peer>", its total over
// the operation's (> 1: tessera is faster).
void report_peer(benchmark::State& state, const std::string& peer, double peer_total, double total);

// barrier, `op`, the slowest rank's elapsed seconds.
template <class Op>
double timed(Communicator& comm, Op&& op) {
  comm.barrier();
  const double t0 = MPI_Wtime();
  op();
  return max_over_ranks(MPI_Wtime() - t0, comm.mpi_comm());
}

// Runs a benchmark program: MPI_Init, splits argv into `own_flags` (with defaults) and
// Google Benchmark's flags, sets this rank's host threads (--threads=N, or its share of
// the node's cores with the default --threads=auto), adds the context,
// calls `register_benchmarks(flags)`, runs them (only rank 0 reports; only rank 0
// writes --benchmark_out), MPI_Finalize. Returns the exit status (errors print once
// per failing rank as "<program>: error on rank R: ...").
int run(int argc, char** argv, const std::string& program, Flags own_flags,
        const std::function<void(const Flags&)>& register_benchmarks);

}  // namespace tessera::bench
