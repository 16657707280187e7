#pragma once
// Private: the flight recorder's side outside the ring (flight_recorder.hpp): which
// communicators keep one, and writing them all to this rank's dump file. The triggers
// (watchdog.cpp, agree.cpp, flight_signal.cpp) call write_flight_dump.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/flight_recorder.hpp"

namespace tessera::detail {

// A ring for the communicator `comm`, registered for the dumps; null when the recorder
// is off (capacity 0). Local (no communication): the ring's key is made from the
// members' world ranks and how many rings over the same members this process made
// before, which is the same on every member because communicators are created
// collectively, in the same order on all of them.
std::shared_ptr<FlightRecorder> make_flight_recorder(MPI_Comm comm);

// Writes every live ring of this process to flight_recorder_dir()/flight-rank<R>.jsonl
// (through a temporary file and a rename, so a reader never sees half a dump), with
// `reason` in its header line and `extra_lines` (complete JSON lines) after the header.
// Returns the path, or "" when there is no ring. Throws IoError. No MPI call: any thread.
std::string write_flight_dump(const std::string& reason, const std::string& extra_lines = {});

// The watchdog's view of a stuck collective, as a JSON line for write_flight_dump: on
// `comm`'s ring, this rank waits in call `call` and `started[r]` is how many collectives
// rank r has started (-1: unknown). "" when `comm` keeps no ring.
std::string flight_arrivals_line(MPI_Comm comm, std::int64_t call, const std::vector<std::int64_t>& started);

// `text` as a JSON string literal (quotes included).
std::string flight_json_quote(const std::string& text);

// Starts the SIGUSR2 dumper (flight_signal.cpp) once per process, unless the program
// already handles SIGUSR2.
void install_flight_signal();

}  // namespace tessera::detail
