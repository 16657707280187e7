#include "comm/flight_recorder.hpp"

#include <time.h>

#include <chrono>
#include <utility>

namespace tessera::detail {

namespace {
constexpr std::uint8_t kCollective = 1;
constexpr std::uint8_t kNccl = 2;
constexpr auto relaxed = std::memory_order_relaxed;
}  // namespace

std::int64_t flight_clock_ns() noexcept {
#if defined(CLOCK_MONOTONIC_COARSE)
  // The kernel tick's clock (1-4 ms resolution): a hang is explained in seconds, and the
  // precise clock cost 210 ns a read on this project's VM (kvm-clock), against 20 ns for
  // this one, two reads per operation of a 2-3 us all-reduce (docs/performance.md).
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

FlightRecorder::FlightRecorder(std::size_t capacity, FlightComm comm)
    : comm_(std::move(comm)), capacity_(capacity), slots_(std::make_unique<Slot[]>(capacity)) {}

std::uint64_t FlightRecorder::post(const FlightOp& op, bool nccl) noexcept {
  const std::uint64_t id = posted_.load(relaxed) + 1;
  const std::int64_t seq =
      op.collective ? collectives_.load(relaxed) + 1 : ++next_p2p_;
  Slot& slot = slots_[next_slot_];
  next_slot_ = next_slot_ + 1 == capacity_ ? 0 : next_slot_ + 1;
  // Seqlock write: the id goes to 0 first, so a concurrent reader drops the slot rather
  // than mixing the old operation's fields with the new one's.
  slot.id.store(0, relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.op.store(op.op, relaxed);
  slot.seq.store(seq, relaxed);
  slot.count.store(op.count, relaxed);
  slot.bytes.store(op.bytes, relaxed);
  slot.peer.store(op.peer, relaxed);
  slot.tag.store(op.tag, relaxed);
  slot.dtype.store(static_cast<std::uint8_t>(op.dtype), relaxed);
  slot.flags.store(static_cast<std::uint8_t>((op.collective ? kCollective : 0) | (nccl ? kNccl : 0)), relaxed);
  slot.completed_ns.store(0, relaxed);
  slot.posted_ns.store(flight_clock_ns(), relaxed);
  slot.id.store(id, std::memory_order_release);
  posted_.store(id, relaxed);
  if (op.collective) collectives_.store(seq, relaxed);
  return id;
}

void FlightRecorder::complete(std::uint64_t ticket) noexcept {
  if (ticket == 0) return;
  // The slot this ticket was written to; it may hold a newer operation by now (more than
  // `capacity` posted since), whose completion this is not.
  Slot& slot = slots_[(ticket - 1) % capacity_];
  if (slot.id.load(relaxed) == ticket) slot.completed_ns.store(flight_clock_ns(), relaxed);
}

bool FlightRecorder::read_slot(const Slot& slot, FlightEntry& out) const noexcept {
  const std::uint64_t before = slot.id.load(std::memory_order_acquire);
  if (before == 0) return false;
  out.id = before;
  out.op = slot.op.load(relaxed);
  out.seq = slot.seq.load(relaxed);
  out.count = slot.count.load(relaxed);
  out.bytes = slot.bytes.load(relaxed);
  out.peer = slot.peer.load(relaxed);
  out.tag = slot.tag.load(relaxed);
  out.dtype = static_cast<DType>(slot.dtype.load(relaxed));
  const std::uint8_t flags = slot.flags.load(relaxed);
  out.collective = (flags & kCollective) != 0;
  out.nccl = (flags & kNccl) != 0;
  out.posted_ns = slot.posted_ns.load(relaxed);
  out.completed_ns = slot.completed_ns.load(relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return slot.id.load(relaxed) == before;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  const std::uint64_t last = posted_.load(std::memory_order_acquire);
  const std::uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  std::vector<FlightEntry> entries;
  entries.reserve(static_cast<std::size_t>(last - first + 1));
  for (std::uint64_t id = first; id <= last; ++id) {
    FlightEntry entry;
    // Keep only the operation this id names: a slot already reused by a later post
    // (the owner went on while we read) is left out rather than listed twice.
    if (read_slot(slots_[(id - 1) % capacity_], entry) && entry.id == id) entries.push_back(entry);
  }
  return entries;
}

}  // namespace tessera::detail
