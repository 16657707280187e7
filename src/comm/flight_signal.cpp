// SIGUSR2 -> this rank's flight-recorder dump. A signal handler may not lock, allocate or
// write files, and a hung rank's main thread may be anywhere (inside MPI, in a sleep), so
// the handler only writes a byte into a pipe; a thread started with the first ring reads
// the pipe and writes the dump. That thread makes no MPI call, so any MPI thread level
// will do, and the rank carries on after the dump (it is a look, not a stop).

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/flight_dump.hpp"

namespace tessera::detail {

namespace {

int g_pipe[2] = {-1, -1};

void on_sigusr2(int) {
  const int saved = errno;  // the interrupted code may be reading errno
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = write(g_pipe[1], &byte, 1);  // a full pipe: a dump is due anyway
  errno = saved;
}

void dump_on_request() {
  for (;;) {
    char byte = 0;
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    try {
      const std::string path = write_flight_dump("SIGUSR2");
      std::fprintf(stderr, "tessera: flight recorder: SIGUSR2: wrote %s\n", path.empty() ? "nothing (no ring)" : path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: flight recorder: SIGUSR2: %s\n", e.what());
    }
  }
}

void install_once() {
  struct sigaction old{};
  if (sigaction(SIGUSR2, nullptr, &old) != 0) return;
  // The program's own SIGUSR2 handler (tessera-run's --stop-signals USR2, say) wins.
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) return;
  if (pipe(g_pipe) != 0) return;
  fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);  // the handler must never block
  fcntl(g_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(g_pipe[1], F_SETFD, FD_CLOEXEC);
  std::thread(dump_on_request).detach();
  struct sigaction action{};
  action.sa_handler = on_sigusr2;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // MPI's system calls never see EINTR
  sigaction(SIGUSR2, &action, nullptr);
}

}  // namespace

void install_flight_signal() {
  static std::once_flag once;
  std::call_once(once, install_once);
}

}  // namespace tessera::detail
