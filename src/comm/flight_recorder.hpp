#pragma once
// Private: the flight recorder's ring buffer (include/tessera/flight_recorder.hpp says
// what users see). Each Communicator made while the recorder is on owns one
// FlightRecorder: the last N operations it posted (collectives and point-to-point
// messages), each with its number on the communicator, its size, dtype, peer and the
// times it was posted and completed. When a job hangs, these rings, dumped by every
// rank (flight_dump.cpp) and merged by tessera-flight, say which rank stopped where.
//
// Cost: posting writes one slot (a dozen relaxed atomic stores and one read of the
// coarse monotonic clock), completing writes one more field and reads the clock again; no
// allocation, no lock, no communication. The slots are atomics only because a dump may read the ring from
// another thread (the SIGUSR2 dumper) while the owner keeps posting: each slot carries
// the id of the operation in it, cleared while it is rewritten, and a reader keeps a slot
// only when it reads the same non-zero id before and after its fields (a seqlock).

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dtype.hpp"

namespace tessera::detail {

// What an operation is, as the communicator posts it.
struct FlightOp {
  const char* op = "";        // a string literal: "all_reduce", "send", ...
  bool collective = true;     // false: point to point (numbered on its own counter)
  std::int64_t count = 0;     // elements of the operation's buffer (see docs: per op)
  DType dtype = DType::f32;
  int peer = -1;              // point to point: the other rank; broadcast: the root; else -1
  int tag = -1;               // point to point: the tag; else -1
  std::int64_t bytes = 0;     // payload bytes, as CommStats counts them
};

// One recorded operation, as a snapshot returns it.
struct FlightEntry {
  std::uint64_t id = 0;            // 1, 2, ... over every operation of the communicator
  const char* op = "";
  bool collective = true;
  bool nccl = false;               // which path carried it (NCCL or MPI)
  std::int64_t seq = 0;            // collectives: 1, 2, ...; point to point: 1, 2, ... of its own
  std::int64_t count = 0;
  DType dtype = DType::f32;
  int peer = -1;
  int tag = -1;
  std::int64_t bytes = 0;
  std::int64_t posted_ns = 0;      // flight_clock_ns()
  std::int64_t completed_ns = 0;   // flight_clock_ns(); 0 while pending
};

// Which communicator a ring belongs to, fixed at its creation.
struct FlightComm {
  std::string key;    // the same on every member (see flight_identity in flight_dump.cpp)
  std::string name;   // MPI_Comm_get_name at creation
  int rank = 0;
  int size = 1;
  MPI_Comm handle = MPI_COMM_NULL;  // compared, never used, by the watchdog's dump
};

// A monotonic clock in nanoseconds, at the kernel tick's resolution where the system has
// a coarse clock (Linux): what posted_ns, completed_ns and a dump's steady_ns hold.
std::int64_t flight_clock_ns() noexcept;

class FlightRecorder {
 public:
  FlightRecorder(std::size_t capacity, FlightComm comm);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records `op` as posted now; returns its ticket for complete(). Owner thread only.
  std::uint64_t post(const FlightOp& op, bool nccl) noexcept;
  // Records the completion of a ticket, unless the ring has since reused its slot.
  void complete(std::uint64_t ticket) noexcept;

  // The operations still in the ring, oldest first. Any thread; a slot being rewritten
  // at that moment is left out.
  std::vector<FlightEntry> snapshot() const;

  const FlightComm& comm() const { return comm_; }
  std::size_t capacity() const { return capacity_; }
  std::uint64_t posted() const { return posted_.load(std::memory_order_relaxed); }
  std::int64_t collectives() const { return collectives_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<std::uint64_t> id{0};
    std::atomic<const char*> op{""};
    std::atomic<std::int64_t> seq{0}, count{0}, bytes{0}, posted_ns{0}, completed_ns{0};
    std::atomic<std::int32_t> peer{-1}, tag{-1};
    std::atomic<std::uint8_t> dtype{0}, flags{0};  // flags: 1 collective, 2 nccl
  };
  bool read_slot(const Slot& slot, FlightEntry& out) const noexcept;

  FlightComm comm_;
  std::size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::size_t next_slot_ = 0;                 // owner thread only
  std::int64_t next_p2p_ = 0;                 // owner thread only
  std::atomic<std::uint64_t> posted_{0};      // ids handed out
  std::atomic<std::int64_t> collectives_{0};  // collective numbers handed out
};

}  // namespace tessera::detail
