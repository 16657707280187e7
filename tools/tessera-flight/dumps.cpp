#include "dumps.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "io/json.hpp"
#include "tessera/error.hpp"

namespace tessera::flight {

namespace {

using io::detail::JsonValue;

struct Line {
  const JsonValue& value;
  const std::string& where;  // "file:line", for errors

  const JsonValue& at(std::string_view key) const {
    const JsonValue* v = value.member(key);
    if (v == nullptr) throw IoError(where + ": no \"" + std::string(key) + "\"");
    return *v;
  }
  std::int64_t integer(std::string_view key) const {
    const JsonValue& v = at(key);
    if (v.kind != JsonValue::Kind::number) throw IoError(where + ": \"" + std::string(key) + "\" is not a number");
    return std::stoll(v.text);
  }
  std::string text(std::string_view key) const {
    const JsonValue& v = at(key);
    if (v.kind == JsonValue::Kind::null) return {};
    if (v.kind != JsonValue::Kind::string) throw IoError(where + ": \"" + std::string(key) + "\" is not a string");
    return v.text;
  }
};

// Ages (seconds before the dump) instead of clock readings: each rank's steady clock
// has its own origin, while "how long ago" compares across ranks and nodes.
double age(std::int64_t now_ns, std::int64_t then_ns) { return static_cast<double>(now_ns - then_ns) * 1e-9; }

Op read_op(const Line& line, std::int64_t now_ns) {
  Op op;
  op.seq = line.integer("seq");
  op.op = line.text("op");
  op.collective = line.at("collective").boolean;
  op.path = line.text("path");
  op.count = line.integer("count");
  op.dtype = line.text("dtype");
  op.bytes = line.integer("bytes");
  op.peer = static_cast<int>(line.integer("peer"));
  op.tag = static_cast<int>(line.integer("tag"));
  op.posted_age = age(now_ns, line.integer("posted_ns"));
  if (line.at("completed_ns").kind != JsonValue::Kind::null) op.completed_age = age(now_ns, line.integer("completed_ns"));
  return op;
}

Arrivals read_arrivals(const Line& line, int reporter) {
  Arrivals a;
  a.reporter_world_rank = reporter;
  a.waiting_call = line.integer("waiting_call");
  for (const JsonValue& n : line.at("started").items) a.started.push_back(std::stoll(n.text));
  return a;
}

void read_file(const std::filesystem::path& file, Dumps& dumps) {
  std::ifstream in(file);
  if (!in) throw IoError("cannot open '" + file.string() + "'");
  DumpHeader header;
  header.file = file.filename().string();
  std::int64_t now_ns = 0;
  RankView* current = nullptr;  // the comm line the op lines that follow belong to
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    const std::string where = file.filename().string() + ":" + std::to_string(number);
    const JsonValue value = io::detail::parse_json(text, where);
    const Line line{value, where};
    const std::string kind = line.text("kind");
    if (kind == "dump") {
      header.world_rank = static_cast<int>(line.integer("world_rank"));
      header.world_size = static_cast<int>(line.integer("world_size"));
      header.host = line.text("host");
      header.reason = line.text("reason");
      now_ns = line.integer("steady_ns");
    } else if (kind == "comm") {
      CommView& comm = dumps.comms[line.text("comm")];
      comm.key = line.text("comm");
      comm.name = line.text("name");
      comm.size = static_cast<int>(line.integer("size"));
      RankView& view = comm.ranks[static_cast<int>(line.integer("rank"))];
      view.world_rank = header.world_rank;
      view.rank = static_cast<int>(line.integer("rank"));
      view.collectives = line.integer("collectives");
      current = &view;
    } else if (kind == "op") {
      if (current == nullptr) throw IoError(where + ": an operation before its communicator's line");
      current->ops.push_back(read_op(line, now_ns));
    } else if (kind == "arrivals") {
      dumps.comms[line.text("comm")].arrivals.push_back(read_arrivals(line, header.world_rank));
    }
  }
  if (header.world_rank < 0) throw IoError("'" + file.string() + "' has no dump header line");
  dumps.world_size = std::max(dumps.world_size, header.world_size);
  dumps.headers.push_back(header);
}

}  // namespace

const Op* RankView::collective(std::int64_t seq) const {
  for (const Op& op : ops) {
    if (op.collective && op.seq == seq) return &op;
  }
  return nullptr;
}

Dumps read_dumps(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw IoError("'" + dir + "' is not a directory");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("flight-rank") && name.ends_with(".jsonl")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  Dumps dumps;
  for (const auto& file : files) read_file(file, dumps);
  std::sort(dumps.headers.begin(), dumps.headers.end(),
            [](const DumpHeader& a, const DumpHeader& b) { return a.world_rank < b.world_rank; });
  return dumps;
}

}  // namespace tessera::flight
