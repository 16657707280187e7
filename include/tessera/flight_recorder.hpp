#pragma once
// The flight recorder: what each communicator last did, for explaining hangs.
//
// Every Communicator made while the recorder is on keeps its last N operations (the
// collectives and point-to-point messages it posted) in a ring: the operation, its number
// on the communicator (collectives 1, 2, ... on every rank alike; point-to-point messages
// numbered on their own), element count, dtype, bytes, peer or root, tag, and the times
// it was posted and completed. Keeping it costs a few stores and two clock reads per
// operation (docs/performance.md has the figure).
//
// Each rank writes its rings to <dir>/flight-rank<world rank>.jsonl (JSON lines, replaced
// by the next dump) when
//   - the collective watchdog fires (TESSERA_COLLECTIVE_TIMEOUT), before the job aborts;
//   - the process receives SIGUSR2 (a thread of the recorder writes it; the rank goes on);
//   - a failure agreement (agree_on_success) reports an error, when TESSERA_FLIGHT_DIR is
//     set (such errors are often expected and caught, so they write nothing by default);
//   - the program calls dump_flight_recorders.
// `tessera-flight DIR` merges the ranks' files and says which ranks are behind, at which
// collective, and which ranks disagree on an operation or its size (docs/driver.md).
//
// N is set_flight_recorder_capacity's value when one was set, else the environment
// variable TESSERA_FLIGHT_RECORDER (operations per communicator; 0 switches it off),
// else 256. It is read when a communicator is created. <dir> is TESSERA_FLIGHT_DIR, else
// the working directory.

#include <cstddef>
#include <string>

namespace tessera {

std::size_t flight_recorder_capacity();  // ConfigError for a bad TESSERA_FLIGHT_RECORDER
void set_flight_recorder_capacity(std::size_t operations);  // for communicators made afterwards
std::string flight_recorder_dir();       // TESSERA_FLIGHT_DIR, or "."

// Writes this rank's rings now (every live communicator's that keeps one), with `reason`
// in the file's first line; returns the file's path, or "" when no communicator keeps a
// ring. Local: no communication. Throws IoError when the file cannot be written.
std::string dump_flight_recorders(const std::string& reason);

}  // namespace tessera
