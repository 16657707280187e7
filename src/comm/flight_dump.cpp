#include "comm/flight_dump.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "tessera/detail/fnv1a.hpp"
#include "tessera/error.hpp"
#include "tessera/flight_recorder.hpp"

namespace tessera {

namespace {

constexpr std::size_t kDefaultCapacity = 256;
// The program's setting; SIZE_MAX: none (the environment decides).
std::atomic<std::size_t> g_capacity{SIZE_MAX};

}  // namespace

std::size_t flight_recorder_capacity() {
  const std::size_t set = g_capacity.load();
  if (set != SIZE_MAX) return set;
  const char* env = std::getenv("TESSERA_FLIGHT_RECORDER");
  if (env == nullptr || *env == '\0') return kDefaultCapacity;
  char* end = nullptr;
  const long long value = std::strtoll(env, &end, 10);
  // An upper bound keeps a typo from reserving gigabytes per communicator.
  if (*end != '\0' || value < 0 || value > 1000000) {
    throw ConfigError(std::string("environment variable TESSERA_FLIGHT_RECORDER: expected a number of operations "
                                  "in [0, 1000000] (0: off), got '") +
                      env + "'");
  }
  return static_cast<std::size_t>(value);
}

void set_flight_recorder_capacity(std::size_t operations) {
  if (operations > 1000000) {
    throw InvalidArgument("set_flight_recorder_capacity: at most 1000000 operations, got " +
                          std::to_string(operations));
  }
  g_capacity.store(operations);
}

std::string flight_recorder_dir() {
  const char* env = std::getenv("TESSERA_FLIGHT_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(".");
}

std::string dump_flight_recorders(const std::string& reason) { return detail::write_flight_dump(reason); }

namespace detail {

namespace {

// The live rings, for the dumps. Weak: a dump never keeps a communicator's ring alive
// past its communicator, and a ring a dump holds survives its communicator's end.
struct Registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<FlightRecorder>> rings;
  std::map<std::uint64_t, int> made_per_members;  // how many rings over these members
  int world_rank = 0;
  int world_size = 1;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the dumper thread may outlive main
  return *r;
}

// The world ranks of `comm`'s members, in its rank order, hashed.
std::uint64_t members_hash(MPI_Comm comm, int size) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<std::size_t>(size)), in_world(ranks.size(), MPI_UNDEFINED);
  for (int r = 0; r < size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, in_world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  std::string text;
  for (int w : in_world) text += std::to_string(w) + ",";
  return fnv1a64(text);
}

FlightComm identify(MPI_Comm comm, Registry& reg) {
  FlightComm id;
  id.handle = comm;
  MPI_Comm_rank(comm, &id.rank);
  MPI_Comm_size(comm, &id.size);
  char name[MPI_MAX_OBJECT_NAME] = {};
  int length = 0;
  MPI_Comm_get_name(comm, name, &length);
  id.name = length > 0 ? std::string(name, static_cast<std::size_t>(length)) : "unnamed";
  const std::uint64_t hash = members_hash(comm, id.size);
  char key[48];
  std::snprintf(key, sizeof key, "%016" PRIx64 "-%d", hash, ++reg.made_per_members[hash]);
  id.key = key;
  return id;
}

std::vector<std::shared_ptr<FlightRecorder>> live_rings(Registry& reg) {
  std::vector<std::shared_ptr<FlightRecorder>> rings;
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (const auto& weak : reg.rings) {
    if (auto ring = weak.lock()) rings.push_back(std::move(ring));
  }
  return rings;
}

std::string number_or_null(std::int64_t ns) { return ns == 0 ? "null" : std::to_string(ns); }

std::string header_line(const std::string& reason, const Registry& reg) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  return "{\"kind\":\"dump\",\"world_rank\":" + std::to_string(reg.world_rank) +
         ",\"world_size\":" + std::to_string(reg.world_size) + ",\"host\":" + flight_json_quote(host) +
         ",\"pid\":" + std::to_string(getpid()) + ",\"reason\":" + flight_json_quote(reason) +
         ",\"steady_ns\":" + std::to_string(flight_clock_ns()) + ",\"wall_ns\":" + std::to_string(wall) + "}\n";
}

std::string comm_line(const FlightRecorder& ring) {
  const FlightComm& c = ring.comm();
  return "{\"kind\":\"comm\",\"comm\":" + flight_json_quote(c.key) + ",\"name\":" + flight_json_quote(c.name) +
         ",\"rank\":" + std::to_string(c.rank) + ",\"size\":" + std::to_string(c.size) +
         ",\"capacity\":" + std::to_string(ring.capacity()) + ",\"posted\":" + std::to_string(ring.posted()) +
         ",\"collectives\":" + std::to_string(ring.collectives()) + "}\n";
}

std::string op_line(const std::string& key, const FlightEntry& e) {
  return "{\"kind\":\"op\",\"comm\":" + flight_json_quote(key) + ",\"id\":" + std::to_string(e.id) +
         ",\"seq\":" + std::to_string(e.seq) + ",\"op\":\"" + e.op + "\",\"collective\":" +
         (e.collective ? "true" : "false") + ",\"path\":\"" + (e.nccl ? "nccl" : "mpi") +
         "\",\"count\":" + std::to_string(e.count) + ",\"dtype\":\"" + std::string(dtype_name(e.dtype)) +
         "\",\"bytes\":" + std::to_string(e.bytes) + ",\"peer\":" + std::to_string(e.peer) +
         ",\"tag\":" + std::to_string(e.tag) + ",\"posted_ns\":" + std::to_string(e.posted_ns) +
         ",\"completed_ns\":" + number_or_null(e.completed_ns) + "}\n";
}

// Writes `text` to `path` through `path`.tmp and a rename.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw IoError("flight recorder: cannot create '" + tmp + "'");
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw IoError("flight recorder: cannot write '" + path + "'");
  }
}

}  // namespace

std::string flight_json_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::shared_ptr<FlightRecorder> make_flight_recorder(MPI_Comm comm) {
  const std::size_t capacity = flight_recorder_capacity();
  if (capacity == 0) return nullptr;
  Registry& reg = registry();
  std::shared_ptr<FlightRecorder> ring;
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    MPI_Comm_rank(MPI_COMM_WORLD, &reg.world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &reg.world_size);
    ring = std::make_shared<FlightRecorder>(capacity, identify(comm, reg));
    // Forget the rings of communicators already gone, so the list does not grow forever.
    std::erase_if(reg.rings, [](const auto& weak) { return weak.expired(); });
    reg.rings.push_back(ring);
  }
  install_flight_signal();
  return ring;
}

std::string write_flight_dump(const std::string& reason, const std::string& extra_lines) {
  Registry& reg = registry();
  const auto rings = live_rings(reg);
  if (rings.empty()) return {};
  std::string text = header_line(reason, reg) + extra_lines;
  for (const auto& ring : rings) {
    text += comm_line(*ring);
    for (const FlightEntry& e : ring->snapshot()) text += op_line(ring->comm().key, e);
  }
  const std::string dir = flight_recorder_dir();
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);  // a failure shows in the write below
  const std::string path = dir + "/flight-rank" + std::to_string(reg.world_rank) + ".jsonl";
  write_atomically(path, text);
  return path;
}

std::string flight_arrivals_line(MPI_Comm comm, std::int64_t call, const std::vector<std::int64_t>& started) {
  for (const auto& ring : live_rings(registry())) {
    if (ring->comm().handle != comm) continue;
    std::string list;
    for (std::int64_t n : started) list += (list.empty() ? "" : ",") + std::to_string(n);
    return "{\"kind\":\"arrivals\",\"comm\":" + flight_json_quote(ring->comm().key) +
           ",\"waiting_call\":" + std::to_string(call) + ",\"started\":[" + list + "]}\n";
  }
  return {};
}

}  // namespace detail
}  // namespace tessera
