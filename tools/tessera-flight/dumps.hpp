#pragma once
// tessera-flight: the ranks' flight-recorder dumps (flight-rank<R>.jsonl, written by
// src/comm/flight_dump.cpp), read into one picture per communicator.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::flight {

// One recorded operation of one rank.
struct Op {
  std::int64_t seq = 0;           // collectives: the same numbering on every rank
  std::string op;                 // "all_reduce", "send", ...
  bool collective = true;
  std::string path;               // "mpi" or "nccl"
  std::int64_t count = 0;         // elements per rank
  std::string dtype;              // "" for a barrier
  std::int64_t bytes = 0;
  int peer = -1;                  // p2p peer, broadcast root
  int tag = -1;
  double posted_age = 0;          // seconds before the dump
  std::optional<double> completed_age;  // empty: still pending at the dump
};

// What one rank's dump says of one communicator.
struct RankView {
  int world_rank = -1;
  int rank = 0;                    // in the communicator
  std::int64_t collectives = 0;    // collectives it has posted on it
  std::vector<Op> ops;             // the ring, oldest first (collectives and p2p)
  const Op* collective(std::int64_t seq) const;  // nullptr when not in the ring
};

// The collective watchdog's reading of the arrival board, from one rank's dump.
struct Arrivals {
  int reporter_world_rank = -1;
  std::int64_t waiting_call = 0;
  std::vector<std::int64_t> started;  // by rank of the communicator; -1 unknown
};

struct CommView {
  std::string key, name;
  int size = 0;
  std::map<int, RankView> ranks;   // by rank in the communicator: the ranks that dumped it
  std::vector<Arrivals> arrivals;
};

struct DumpHeader {
  int world_rank = -1;
  int world_size = 0;
  std::string host, reason;
  std::string file;
};

struct Dumps {
  std::vector<DumpHeader> headers;      // by world rank
  std::map<std::string, CommView> comms;  // by key
  int world_size = 0;
};

// Reads every flight-rank*.jsonl in `dir`. Throws IoError naming a bad file and line.
Dumps read_dumps(const std::string& dir);

}  // namespace tessera::flight
