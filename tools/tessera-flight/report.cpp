#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::flight {

namespace {

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}

std::string list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

std::string collectives(std::int64_t n) { return std::to_string(n) + (n == 1 ? " collective" : " collectives"); }

std::string ranks_label(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + list(ranks);
}

// What must agree across ranks for one collective: a difference is a mismatch.
std::string signature(const Op& op) {
  std::string text = op.op;
  if (op.dtype.empty()) return text;  // a barrier carries nothing
  text += " of " + std::to_string(op.count) + " x " + op.dtype + " (" + std::to_string(op.bytes) + " bytes)";
  if (op.op == "broadcast") text += " from root " + std::to_string(op.peer);
  return text;
}

std::string state(const Op& op) {
  return op.completed_age ? "completed" : "pending for " + seconds(op.posted_age) + " at the dump";
}

// How many collectives each rank of `comm` has posted: its own dump's count, else the
// largest the watchdog's arrival board showed in another rank's dump, else unknown (-1).
std::vector<std::int64_t> positions(const CommView& comm, std::vector<bool>& from_board) {
  std::vector<std::int64_t> posted(static_cast<std::size_t>(comm.size), -1);
  from_board.assign(posted.size(), false);
  for (const Arrivals& a : comm.arrivals) {
    for (std::size_t r = 0; r < posted.size() && r < a.started.size(); ++r) {
      if (a.started[r] > posted[r]) {
        posted[r] = a.started[r];
        from_board[r] = true;
      }
    }
  }
  for (const auto& [rank, view] : comm.ranks) {
    posted[static_cast<std::size_t>(rank)] = view.collectives;
    from_board[static_cast<std::size_t>(rank)] = false;
  }
  return posted;
}

// The operation a collective number names, from the first rank whose ring holds it.
const Op* find_collective(const CommView& comm, std::int64_t seq, const std::vector<int>& among) {
  for (int r : among) {
    const auto it = comm.ranks.find(r);
    if (it == comm.ranks.end()) continue;
    if (const Op* op = it->second.collective(seq)) return op;
  }
  return nullptr;
}

std::string describe(const CommView& comm, std::int64_t seq, const std::vector<int>& among) {
  const Op* op = find_collective(comm, seq, among);
  return "collective #" + std::to_string(seq) + (op ? " (" + signature(*op) + ")" : "");
}

class CommReport {
 public:
  CommReport(const CommView& comm, std::ostream& out) : comm_(comm), out_(out) {}

  int run() {
    out_ << "communicator '" << comm_.name << "' (" << comm_.size << " ranks, key " << comm_.key << "): "
         << comm_.ranks.size() << " of " << comm_.size << " ranks dumped it\n";
    positions_ = positions(comm_, from_board_);
    level();
    mismatches();
    pending_messages();
    if (problems_ == 0) out_ << "  ok: every rank has posted " << collectives(lead_) << " and agrees on them\n";
    return problems_;
  }

 private:
  // Who is ahead, who is behind, and what the ranks ahead wait in.
  void level() {
    lead_ = *std::max_element(positions_.begin(), positions_.end());
    std::vector<int> ahead, unknown;
    for (int r = 0; r < comm_.size; ++r) {
      const std::int64_t p = positions_[static_cast<std::size_t>(r)];
      if (p < 0) unknown.push_back(r);
      if (p == lead_) ahead.push_back(r);
    }
    std::vector<int> waiting;
    for (int r : ahead) {
      const auto it = comm_.ranks.find(r);
      const Op* op = it == comm_.ranks.end() ? nullptr : it->second.collective(lead_);
      if (op != nullptr && !op->completed_age) waiting.push_back(r);
    }
    if (!waiting.empty()) {
      out_ << "  waiting: " << describe(comm_, lead_, waiting) << " has not completed on " << ranks_label(waiting)
           << "\n";
    }
    for (int r = 0; r < comm_.size; ++r) {
      const std::int64_t p = positions_[static_cast<std::size_t>(r)];
      if (p >= 0 && p < lead_) behind(r, p, ahead);
    }
    for (int r : unknown) {
      ++problems_;
      out_ << "  missing: rank " << r << " left no dump, and no arrival board shows its progress\n";
    }
    const bool level_and_stuck = !waiting.empty() && ahead.size() == static_cast<std::size_t>(comm_.size);
    if (level_and_stuck) {
      ++problems_;
      out_ << "  stuck: every rank has posted collective #" << lead_
           << ", and it has not completed on " << ranks_label(waiting) << "\n";
    }
  }

  void behind(int rank, std::int64_t posted, const std::vector<int>& ahead) {
    ++problems_;
    out_ << "  behind: rank " << rank << label_world(rank) << " has posted " << collectives(posted);
    if (from_board_[static_cast<std::size_t>(rank)]) {
      out_ << " (it left no dump: the watchdog's arrival board says so)";
    } else if (posted > 0) {
      const Op* last = comm_.ranks.at(rank).collective(posted);
      if (last != nullptr) out_ << ", the last #" << posted << " " << signature(*last) << ", " << state(*last);
    }
    out_ << "; it has not reached " << describe(comm_, posted + 1, ahead) << ", which "
         << ranks_label(ahead) << " posted (they are at #" << lead_ << ")\n";
  }

  std::string label_world(int rank) const {
    const auto it = comm_.ranks.find(rank);
    if (it == comm_.ranks.end() || it->second.world_rank == rank) return "";
    return " (world rank " + std::to_string(it->second.world_rank) + ")";
  }

  // Collectives that two ranks both recorded, with a different operation, size or root.
  void mismatches() {
    std::set<std::int64_t> seqs;
    for (const auto& [rank, view] : comm_.ranks) {
      for (const Op& op : view.ops) {
        if (op.collective) seqs.insert(op.seq);
      }
    }
    int shown = 0;
    for (std::int64_t seq : seqs) {
      std::map<std::string, std::vector<int>> by_signature;
      for (const auto& [rank, view] : comm_.ranks) {
        if (const Op* op = view.collective(seq)) by_signature[signature(*op)].push_back(rank);
      }
      if (by_signature.size() < 2) continue;
      ++problems_;
      if (++shown > 5) continue;  // the first few say enough; the count still says how many
      out_ << "  mismatch: collective #" << seq << ":";
      const char* separator = " ";
      for (const auto& [text, ranks] : by_signature) {
        out_ << separator << ranks_label(ranks) << " posted " << text;
        separator = "; ";
      }
      out_ << "\n";
    }
    if (shown > 5) out_ << "  (" << shown - 5 << " more mismatched collectives not shown)\n";
  }

  // Point-to-point messages still pending at the dump: in a pipeline, the hang's edge.
  void pending_messages() {
    for (const auto& [rank, view] : comm_.ranks) {
      for (const Op& op : view.ops) {
        if (op.collective || op.completed_age) continue;
        ++problems_;
        out_ << "  pending: rank " << rank << " " << op.op << (op.op == "send" ? " to" : " from") << " rank "
             << op.peer << " (tag " << op.tag << ", " << op.count << " x " << op.dtype << ", message #" << op.seq
             << "), " << state(op) << "\n";
      }
    }
  }

  const CommView& comm_;
  std::ostream& out_;
  std::vector<std::int64_t> positions_;
  std::vector<bool> from_board_;
  std::int64_t lead_ = 0;
  int problems_ = 0;
};

}  // namespace

int write_report(const Dumps& dumps, std::ostream& out) {
  out << "tessera-flight: " << dumps.headers.size() << " dumps (world size " << dumps.world_size << ")\n";
  std::vector<bool> dumped(static_cast<std::size_t>(dumps.world_size), false);
  for (const DumpHeader& h : dumps.headers) {
    out << "  world rank " << h.world_rank << " (" << h.host << ", " << h.file << "): " << h.reason << "\n";
    if (h.world_rank >= 0 && h.world_rank < dumps.world_size) dumped[static_cast<std::size_t>(h.world_rank)] = true;
  }
  std::vector<int> silent;
  for (int r = 0; r < dumps.world_size; ++r) {
    if (!dumped[static_cast<std::size_t>(r)]) silent.push_back(r);
  }
  if (!silent.empty()) out << "  no dump from world " << ranks_label(silent) << "\n";
  int problems = 0;
  for (const auto& [key, comm] : dumps.comms) problems += CommReport(comm, out).run();
  out << "tessera-flight: " << problems << (problems == 1 ? " problem" : " problems") << " found\n";
  return problems;
}

}  // namespace tessera::flight
