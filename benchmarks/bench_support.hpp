#pragma once
// What every tessera benchmark shares: MPI start-up, flags of its own beside Google
// Benchmark's, rank-0-only reporting, context (ranks, mesh, backend, MPI and NCCL
// versions, git hash, host threads), the world communicators of tessera and of its
// plain-MPI peer, iteration timing as the maximum over ranks, and the device of the
// programs that take --device=host|cuda.
//
// Timing rule: every timed iteration is barrier -> time the operation -> MPI_Allreduce
// MAX of the elapsed time -> SetIterationTime. Every rank therefore reports the same
// time, and Google Benchmark makes the same iteration-count decisions on every rank
// (which it must: the operations are collectives). On a CUDA device the operation's
// queued work is drained before the barrier and before the clock stops, so a time
// covers the kernels, not their launches.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/device.hpp"

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

// The device of a program whose own flags include "device" (--device=host|cuda): the
// host, or this rank's GPU, local rank % visible devices (the rule of a Mesh built on
// Device::cuda(), so two ranks on one GPU share it). Set by run() before
// register_benchmarks; the host for programs without the flag.
Device device();

// Blocks until the work queued on `device` is done (nothing to do on the host).
void synchronize(Device device);

// barrier, `op`, the slowest rank's elapsed seconds; on a CUDA device the queue is
// drained before the barrier and after `op`.
template <class Op>
double timed(Communicator& comm, Op&& op, Device on = Device::host()) {
  synchronize(on);
  comm.barrier();
  const double t0 = MPI_Wtime();
  op();
  synchronize(on);
  return max_over_ranks(MPI_Wtime() - t0, comm.mpi_comm());
}

// Runs a benchmark program: MPI_Init, splits argv into `own_flags` (with defaults) and
// Google Benchmark's flags, sets this rank's host threads (--threads=N, or its share of
// the node's cores with the default --threads=auto), settles device() when `own_flags`
// has "device" (--device=cuda where a rank sees no GPU: rank 0 prints one line saying
// so and the program returns 0 having run nothing, so that a script or a test may ask
// for the GPU on any machine), adds the context, calls `register_benchmarks(flags)`,
// runs them (only rank 0 reports; only rank 0 writes --benchmark_out), MPI_Finalize.
// Returns the exit status (errors print once per failing rank as
// "<program>: error on rank R: ...").
int run(int argc, char** argv, const std::string& program, Flags own_flags,
        const std::function<void(const Flags&)>& register_benchmarks);

}  // namespace tessera::bench
