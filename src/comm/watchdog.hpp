#pragma once
// Private: the collective watchdog (wait_policy.hpp says what users see). Every wait of
// the library goes through one loop (request.cpp); with a timeout set, that loop calls
// watchdog_abort once a wait has lasted longer than it.
//
// To name the ranks that have not arrived, each Communicator made while a timeout is set
// keeps an ArrivalBoard: per rank, how many calls it has started on that communicator.
// Starting a call is a local store (no communication); only the rank that times out
// reads the others' counters, and a rank whose counter is below the stuck call's number
// has not reached it. A missing rank is, by definition, not calling MPI, so the read
// must not need its help: the counters of the ranks on this node live in an MPI
// shared-memory window and are read with plain loads; those of other nodes are read with
// one-sided gets (RDMA on the networks that offer it), given a few seconds, and reported
// as unknown when they do not arrive.

#include <mpi.h>

#include "comm/node_window.hpp"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace tessera::detail {

// Made by make_arrival_board and ended by retire_arrival_board (below).
class ArrivalBoard {
 public:
  // Collective over `comm`.
  explicit ArrivalBoard(MPI_Comm comm);
  ArrivalBoard(const ArrivalBoard&) = delete;
  ArrivalBoard& operator=(const ArrivalBoard&) = delete;

  // This rank starts its next call on the communicator: returns the call's number (1, 2, ...).
  std::int64_t arrive();
  // Every rank's count of started calls; -1 for a rank whose counter could not be
  // read within `seconds` (another node's rank, without RDMA, making no MPI progress).
  std::vector<std::int64_t> read_all(double seconds) const;

  void release() noexcept;  // frees the windows and the node communicator (collective); idempotent

 private:
  NodeWindow node_;                         // this node's ranks' counters, in shared memory
  MPI_Win window_ = MPI_WIN_NULL;           // every rank's counter, for one-sided gets
  std::int64_t* mine_ = nullptr;
  std::vector<const std::int64_t*> local_;  // by communicator rank: the counter on this node, or null
  int size_ = 1;
};

// A board for `comm` (collective), registered so that MPI_Finalize frees any board still
// alive then, in creation order, through an attribute of MPI_COMM_SELF: MPI must not be
// finalised with windows open (a Mesh destroyed after MPI_Finalize).
std::shared_ptr<ArrivalBoard> make_arrival_board(MPI_Comm comm);
// The communicator is going away: frees the board now (collective), except while an
// exception unwinds, when no destructor may start a collective that other ranks may not
// join; the board is then left to MPI_Finalize. Resets `board`.
void retire_arrival_board(std::shared_ptr<ArrivalBoard>& board) noexcept;

// What a wait is for, as the watchdog reports it.
struct WaitSite {
  WaitSite(const char* operation_ = "an MPI request", MPI_Comm comm_ = MPI_COMM_NULL,
           std::shared_ptr<const ArrivalBoard> board_ = {}, std::int64_t call_ = 0)
      : operation(operation_), comm(comm_), board(std::move(board_)), call(call_) {}
  const char* operation;
  MPI_Comm comm;
  std::shared_ptr<const ArrivalBoard> board;  // the communicator's, when it keeps one
  std::int64_t call;                          // this call's number on it
};

// Prints the report (operation, communicator name and size, this rank in it and in
// MPI_COMM_WORLD, the wait, the ranks that have not reached the call) on stderr and
// aborts every rank with MPI_Abort(MPI_COMM_WORLD, 3).
[[noreturn]] void watchdog_abort(const WaitSite& site, double waited_seconds);

}  // namespace tessera::detail
