#pragma once
// tessera-flight: what the merged dumps say. Per communicator: which ranks are behind
// (fewer collectives posted than the others) and at which collective, which collective
// the others wait in, which ranks disagree on a collective's operation, size, dtype or
// root, and which point-to-point messages are still pending.

#include <ostream>

#include "dumps.hpp"

namespace tessera::flight {

// Writes the report; returns the number of problems found (0: nothing explains a hang).
int write_report(const Dumps& dumps, std::ostream& out);

}  // namespace tessera::flight
