// Jobs that hang or fail on purpose, for check_flight.cmake: every rank's flight recorder
// is dumped, and tessera-flight must say which rank did what. The misbehaving rank is the
// last one (V = size - 1); every rank first makes collective #1 (an all-reduce of 8 f32).
//
//   flight_hang stop       V sleeps; the others wait in collective #2 until the watchdog
//                          (TESSERA_COLLECTIVE_TIMEOUT) dumps and aborts. V leaves no
//                          dump: only the watchdog's arrival board shows where it is.
//   flight_hang skip       V skips collective #2: its next all-reduce matches the others'
//                          #2, and they wait in #3. V then dumps on SIGUSR2 (what an
//                          operator's `kill -USR2` does) and sleeps until the abort.
//   flight_hang mismatch   collective #2 is an all-reduce of 16 f32 on V and of 8 on the
//                          others; whatever MPI makes of it (an error or a hang), the
//                          ranks end in a failure agreement or the watchdog, which dump.
//   flight_hang ok         20 all-reduces, then dump_flight_recorders: nothing to report.

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "tessera/agree.hpp"
#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/flight_recorder.hpp"

using namespace tessera;

namespace {

void sleep_until_killed() { std::this_thread::sleep_for(std::chrono::seconds(60)); }

Tensor floats(std::int64_t n) { return Tensor::zeros({n}, DType::f32); }

void mismatch(Communicator& comm, int rank, int victim) {
  Tensor y = floats(rank == victim ? 16 : 8);
  std::string error;
  try {
    comm.all_reduce(y);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank fails the agreement (on MPI_COMM_WORLD, which the mismatch did not touch),
  // which dumps with TESSERA_FLIGHT_DIR set.
  try {
    agree_on_success(MPI_COMM_WORLD, [&] {
      throw InvalidArgument("flight_hang mismatch: stop after collective #2" + (error.empty() ? "" : ": " + error));
    });
  } catch (const Error& e) {
    if (rank == 0) std::printf("flight_hang mismatch: %s\n", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int victim = size - 1;
  {
    Communicator comm(MPI_COMM_WORLD);
    Tensor x = floats(8);
    comm.all_reduce(x);  // #1 everywhere
    if (mode == "stop") {
      if (rank == victim) sleep_until_killed();
      comm.all_reduce(x);
    } else if (mode == "skip") {
      if (rank != victim) comm.all_reduce(x);  // #2, skipped by the victim
      comm.all_reduce(x);                      // #3; the victim's #2
      if (rank == victim) {
        std::raise(SIGUSR2);
        sleep_until_killed();
      }
    } else if (mode == "mismatch") {
      mismatch(comm, rank, victim);
    } else if (mode == "ok") {
      for (int i = 0; i < 20; ++i) comm.all_reduce(x);
      dump_flight_recorders("flight_hang ok");
    }
  }
  MPI_Finalize();
  return 0;
}
