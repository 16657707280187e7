#include "comm/watchdog.hpp"

#include "comm/flight_dump.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::detail {

namespace {

// The live boards, in creation order, for the MPI_Finalize hook.
std::mutex g_boards_mutex;
std::vector<std::shared_ptr<ArrivalBoard>> g_boards;

int release_boards_at_finalize(MPI_Comm, int, void*, void*) {
  std::vector<std::shared_ptr<ArrivalBoard>> boards;
  {
    std::lock_guard<std::mutex> lock(g_boards_mutex);
    boards.swap(g_boards);
  }
  for (const auto& board : boards) board->release();
  return MPI_SUCCESS;
}

}  // namespace

std::shared_ptr<ArrivalBoard> make_arrival_board(MPI_Comm comm) {
  auto board = std::make_shared<ArrivalBoard>(comm);
  std::lock_guard<std::mutex> lock(g_boards_mutex);
  static const bool hooked = [] {
    int key = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release_boards_at_finalize, &key, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr);
    return true;
  }();
  (void)hooked;
  g_boards.push_back(board);
  return board;
}

void retire_arrival_board(std::shared_ptr<ArrivalBoard>& board) noexcept {
  if (!board) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && std::uncaught_exceptions() == 0) {
    board->release();
    std::lock_guard<std::mutex> lock(g_boards_mutex);
    g_boards.erase(std::remove(g_boards.begin(), g_boards.end(), board), g_boards.end());
  }
  board.reset();
}

ArrivalBoard::ArrivalBoard(MPI_Comm comm) : node_(comm) {
  MPI_Comm_size(comm, &size_);
  node_.allocate(sizeof(std::int64_t));
  mine_ = reinterpret_cast<std::int64_t*>(node_.mine());
  std::atomic_ref<std::int64_t>(*mine_).store(0);
  // The same counter, exposed to every rank of the communicator for one-sided gets.
  MPI_Win_create(mine_, sizeof(std::int64_t), static_cast<int>(sizeof(std::int64_t)), MPI_INFO_NULL, comm, &window_);
  // One passive epoch for the window's life: reads need no call from the target.
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
  // Where each node peer's counter is, by its rank in the communicator.
  local_.assign(static_cast<std::size_t>(size_), nullptr);
  for (int peer = 0; peer < size_; ++peer) {
    local_[static_cast<std::size_t>(peer)] = reinterpret_cast<const std::int64_t*>(node_.of(peer));
  }
}

void ArrivalBoard::release() noexcept {
  if (window_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);
  node_.release();
  mine_ = nullptr;
  local_.clear();
}

std::int64_t ArrivalBoard::arrive() {
  const std::int64_t call = *mine_ + 1;
  std::atomic_ref<std::int64_t>(*mine_).store(call, std::memory_order_release);
  return call;
}

std::vector<std::int64_t> ArrivalBoard::read_all(double seconds) const {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size_), -1);
  std::vector<MPI_Request> requests;
  std::vector<std::int64_t> remote;  // gets land here, then move to counts
  std::vector<int> remote_rank;
  remote.reserve(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (const std::int64_t* counter = local_[static_cast<std::size_t>(r)]) {
      counts[static_cast<std::size_t>(r)] =
          std::atomic_ref<std::int64_t>(*const_cast<std::int64_t*>(counter)).load(std::memory_order_acquire);
      continue;
    }
    remote.push_back(-1);
    remote_rank.push_back(r);
    requests.push_back(MPI_REQUEST_NULL);
    if (MPI_Rget(&remote.back(), 1, MPI_INT64_T, r, 0, 1, MPI_INT64_T, window_, &requests.back()) != MPI_SUCCESS) {
      requests.pop_back();
      remote.pop_back();
      remote_rank.pop_back();
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!requests.empty()) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      break;
    }
    if (done) {
      for (std::size_t i = 0; i < remote.size(); ++i) counts[static_cast<std::size_t>(remote_rank[i])] = remote[i];
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return counts;
}

namespace {

// This rank's flight-recorder dump, with what the board says of the stuck call; returns
// "; flight recorder: wrote PATH" for the report line ("" without a ring).
std::string dump_for_watchdog(const std::string& reason, const WaitSite& site,
                              const std::vector<std::int64_t>& counts) {
  try {
    const std::string extra = counts.empty() ? std::string() : flight_arrivals_line(site.comm, site.call, counts);
    const std::string path = write_flight_dump(reason, extra);
    return path.empty() ? std::string() : "; flight recorder: wrote " + path;
  } catch (const std::exception& e) {
    return std::string("; flight recorder: ") + e.what();
  }
}

}  // namespace

void watchdog_abort(const WaitSite& site, double waited_seconds) {
  int world_rank = 0, rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string comm_text = "no communicator";
  if (site.comm != MPI_COMM_NULL) {
    char name[MPI_MAX_OBJECT_NAME] = {};
    int length = 0;
    MPI_Comm_get_name(site.comm, name, &length);
    MPI_Comm_rank(site.comm, &rank);
    MPI_Comm_size(site.comm, &size);
    comm_text = "communicator '" + std::string(length > 0 ? name : "unnamed") + "' (rank " + std::to_string(rank) +
                " of " + std::to_string(size) + ")";
  }
  std::string arrivals;
  std::vector<std::int64_t> counts;
  if (site.board && site.call > 0) {
    counts = site.board->read_all(5.0);
    std::string missing, behind, unknown;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] < 0) {
        unknown += (unknown.empty() ? "" : ", ") + std::to_string(r);
      } else if (counts[r] < site.call) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        behind += (behind.empty() ? "" : ", ") + std::to_string(counts[r]);
      }
    }
    if (!missing.empty()) {
      arrivals = "; ranks of this communicator that have not reached it: " + missing + " (they have started " +
                 behind + " calls)";
    } else if (unknown.empty()) {
      arrivals = "; every rank has reached this call (a lost message or a peer stuck inside MPI)";
    }
    if (!unknown.empty()) arrivals += "; ranks whose progress could not be read (other nodes): " + unknown;
    arrivals = " (call #" + std::to_string(site.call) + " on it)" + arrivals;
  }
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f", waited_seconds);
  const std::string reason =
      std::string("collective watchdog: waited ") + waited + " s for " + site.operation + " on " + comm_text + arrivals;
  const std::string dump = dump_for_watchdog(reason, site, counts);
  std::fprintf(stderr,
               "tessera: collective watchdog: world rank %d waited %.1f s for %s on %s%s; "
               "aborting the job (TESSERA_COLLECTIVE_TIMEOUT)%s\n",
               world_rank, waited_seconds, site.operation, comm_text.c_str(), arrivals.c_str(), dump.c_str());
  std::fflush(stderr);
  // Give the launcher's output forwarding a moment: MPI_Abort kills at once. With a
  // flight recorder, longer: the other ranks waiting in the same call time out at about
  // the same moment, and their dumps should land before the abort kills them.
  std::this_thread::sleep_for(std::chrono::milliseconds(dump.empty() ? 300 : 2000));
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace tessera::detail
