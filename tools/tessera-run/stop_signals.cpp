// tessera-run's signals: the stop flag the preemption signals set (read at step
// boundaries by the training loop) and the --kill-during-save test hook.

#include "stop_signals.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tessera/error.hpp"

namespace tessera::run {
namespace {

// Set by the handler of SIGTERM / SIGUSR1 (the signal number); read at step boundaries.
// Lock-free, hence async-signal-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::int64_t g_kill_during_save = -1;

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  // The first signal wins; a second one (while saving, say) changes nothing.
  g_stop_signal.compare_exchange_strong(expected, sig);
}

extern "C" void kill_self_now(int) { ::kill(::getpid(), SIGKILL); }

// The signals --stop-signals may name.
constexpr std::pair<const char*, int> kStopSignals[] = {
    {"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"INT", SIGINT}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT}};

}  // namespace

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "a signal";
  }
}

// --kill-during-save: from now on, the first write that extends a file (the save's own
// HDF5 files: nothing else writes regular files during a save) raises SIGXFSZ, whose
// handler kills the process. A rank that writes nothing itself (a rank holding only
// replicas) is killed by a watcher once the save's temporary directory exists. Either way
// the directory is left unfinished, as after a real kill.
void arm_kill_during_save(const std::string& root, std::int64_t step) {
  struct sigaction sa {};
  sa.sa_handler = kill_self_now;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGXFSZ, &sa, nullptr);
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, ".step_%08lld.tmp-", static_cast<long long>(step));
  std::thread([root, p = std::string(prefix)] {
    for (;;) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
        if (e.path().filename().string().rfind(p, 0) == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the writers get going
          ::kill(::getpid(), SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }).detach();
  struct rlimit limit {};
  ::getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = 0;
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

std::vector<int> parse_stop_signals(const std::string& list) {
  std::vector<int> signals;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int sig = 0;
    for (const auto& [known, number] : kStopSignals) {
      if (name == known) sig = number;
    }
    if (sig == 0) {
      throw InvalidArgument("--stop-signals: unknown signal '" + name +
                            "' (expected a comma-separated list of TERM, USR1, USR2, INT, HUP, QUIT)");
    }
    signals.push_back(sig);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return signals;
}

void install_stop_signal_handlers(const std::vector<int>& signals) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's and HDF5's system calls must not see EINTR
  for (int sig : signals) ::sigaction(sig, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal.load(); }

void set_kill_during_save(std::int64_t step) { g_kill_during_save = step; }

bool kill_during_save_due(std::int64_t step) { return step == g_kill_during_save; }

}  // namespace tessera::run
