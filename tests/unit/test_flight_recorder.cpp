// The flight recorder's ring (src/comm/flight_recorder.hpp): what it keeps, in which
// order, after it wraps around, and that a reader on another thread (the SIGUSR2 dumper)
// never sees an operation mixed with another. The dumps and their merge are tested
// end to end by tests/mpi/check_flight.cmake.

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "comm/flight_recorder.hpp"
#include "tessera/comm.hpp"
#include "tessera/flight_recorder.hpp"

namespace {

using tessera::DType;
using tessera::detail::FlightEntry;
using tessera::detail::FlightOp;
using tessera::detail::FlightRecorder;

FlightOp collective(std::int64_t count) { return FlightOp{"all_reduce", true, count, DType::f32, -1, -1, count * 4}; }
FlightOp message(int peer) { return FlightOp{"send", false, 2, DType::f64, peer, 7, 16}; }

TEST(FlightRecorder, KeepsOperationsInOrderWithTheirNumbers) {
  FlightRecorder ring(8, {});
  const auto a = ring.post(collective(8), false);
  const auto b = ring.post(message(1), false);
  const auto c = ring.post(collective(16), true);
  ring.complete(a);
  const auto entries = ring.snapshot();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].id, a);
  EXPECT_EQ(entries[1].id, b);
  EXPECT_EQ(entries[2].id, c);
  // Collectives and messages are numbered apart: the collectives' numbers match across ranks.
  EXPECT_EQ(entries[0].seq, 1);
  EXPECT_EQ(entries[1].seq, 1);
  EXPECT_EQ(entries[2].seq, 2);
  EXPECT_TRUE(entries[0].collective);
  EXPECT_FALSE(entries[1].collective);
  EXPECT_EQ(entries[1].peer, 1);
  EXPECT_EQ(entries[1].tag, 7);
  EXPECT_EQ(entries[1].dtype, DType::f64);
  EXPECT_EQ(entries[2].count, 16);
  EXPECT_EQ(entries[2].bytes, 64);
  EXPECT_TRUE(entries[2].nccl);
  EXPECT_STREQ(entries[0].op, "all_reduce");
  EXPECT_GT(entries[0].completed_ns, 0);
  EXPECT_GE(entries[0].completed_ns, entries[0].posted_ns);
  EXPECT_EQ(entries[1].completed_ns, 0);  // pending
  EXPECT_EQ(ring.collectives(), 2);
  EXPECT_EQ(ring.posted(), 3u);
}

TEST(FlightRecorder, WrapsAroundKeepingTheLastOperationsOldestFirst) {
  FlightRecorder ring(4, {});
  std::uint64_t tickets[10];
  for (int i = 0; i < 10; ++i) tickets[i] = ring.post(collective(i + 1), false);
  const auto entries = ring.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(entries[k].id, tickets[6 + k]);
    EXPECT_EQ(entries[k].seq, 7 + k);
    EXPECT_EQ(entries[k].count, 7 + k);
  }
  // A completion whose slot has been reused since marks nothing (it is not that operation's).
  ring.complete(tickets[2]);  // slot of tickets[6] now
  ring.complete(tickets[9]);
  const auto after = ring.snapshot();
  EXPECT_EQ(after[0].completed_ns, 0);
  EXPECT_GT(after[3].completed_ns, 0);
  EXPECT_EQ(ring.collectives(), 10);
}

TEST(FlightRecorder, AReaderOnAnotherThreadNeverSeesATornOperation) {
  FlightRecorder ring(16, {});
  std::atomic<bool> stop{false};
  std::atomic<long> checked{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const FlightEntry& e : ring.snapshot()) {
        // Every operation was posted with count = seq and bytes = 4 * count.
        ASSERT_EQ(e.count, e.seq);
        ASSERT_EQ(e.bytes, 4 * e.count);
        ++checked;
      }
    }
  });
  for (int i = 1; i <= 200000; ++i) ring.complete(ring.post(collective(i), false));
  stop = true;
  reader.join();
  EXPECT_GT(checked.load(), 0);
}

TEST(FlightRecorder, ACommunicatorDumpsItsRingAsJsonLines) {
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_flight_unit_" + std::to_string(::getpid()));
  setenv("TESSERA_FLIGHT_DIR", dir.c_str(), 1);
  tessera::set_flight_recorder_capacity(4);
  {
    tessera::Communicator comm(MPI_COMM_WORLD);
    tessera::Tensor x = tessera::Tensor::zeros({3}, DType::f32);
    comm.all_reduce(x);  // a group of one communicates nothing and records nothing
    const std::string path = tessera::dump_flight_recorders("unit test");
    ASSERT_EQ(path, (dir / "flight-rank0.jsonl").string());
    std::ifstream in(path);
    std::string header, comm_line, extra;
    std::getline(in, header);
    std::getline(in, comm_line);
    EXPECT_NE(header.find("\"reason\":\"unit test\""), std::string::npos) << header;
    EXPECT_NE(comm_line.find("\"kind\":\"comm\""), std::string::npos) << comm_line;
    EXPECT_NE(comm_line.find("\"capacity\":4"), std::string::npos) << comm_line;
    EXPECT_NE(comm_line.find("\"collectives\":0"), std::string::npos) << comm_line;
    EXPECT_FALSE(std::getline(in, extra)) << extra;
  }
  tessera::set_flight_recorder_capacity(0);
  {
    tessera::Communicator off(MPI_COMM_WORLD);
    EXPECT_EQ(tessera::dump_flight_recorders("off"), "");  // no ring left alive
  }
  std::filesystem::remove_all(dir);
  unsetenv("TESSERA_FLIGHT_DIR");
}

}  // namespace
