// tessera-flight: merges the ranks' flight-recorder dumps of a hung or failed job
// (TESSERA_FLIGHT_DIR, tessera/flight_recorder.hpp) and says which ranks are behind, at
// which collective, and which ranks disagree on an operation or its size.
//
//   tessera-flight DIR
//
// Exit status: 0 nothing found that explains a hang, 1 problems reported, 2 usage or I/O
// error.

#include <exception>
#include <iostream>
#include <string>

#include "dumps.hpp"
#include "report.hpp"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: tessera-flight DIR   (DIR holds the ranks' flight-rank<R>.jsonl dumps)\n";
    return 2;
  }
  try {
    const tessera::flight::Dumps dumps = tessera::flight::read_dumps(argv[1]);
    if (dumps.headers.empty()) {
      std::cerr << "tessera-flight: no flight-rank*.jsonl in '" << argv[1] << "'\n";
      return 2;
    }
    return tessera::flight::write_report(dumps, std::cout) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera-flight: " << e.what() << "\n";
    return 2;
  }
}
