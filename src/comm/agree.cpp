#include "tessera/agree.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/flight_dump.hpp"
#include "comm/request_state.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"
#include "tessera/detail/fnv1a.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera {

namespace {

// Agreement is off the hot path: it always sleep-polls, which keeps it cheap on
// oversubscribed nodes, at the interval the communicators use (TESSERA_WAIT_SLEEP_US).
WaitOptions agreement_wait() {
  return WaitOptions{WaitPolicy::sleep, resolve_sleep_interval(WaitOptions{}.sleep_interval)};
}

// A failure agreement is a moment every rank sees the same error: each writes its flight
// recorder, when the operator asked for dumps with TESSERA_FLIGHT_DIR. Not by default:
// such errors are often expected and caught (a bad config value), and the working
// directory would fill with dumps nobody asked for.
void dump_flight_for_agreement(const std::string& message) {
  const char* dir = std::getenv("TESSERA_FLIGHT_DIR");
  if (dir == nullptr || *dir == '\0') return;
  try {
    detail::write_flight_dump("failure agreement: " + message);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: flight recorder: %s\n", e.what());
  }
}

}  // namespace

void agree_on_success(MPI_Comm comm, const std::function<void()>& step) {
  int rank = 0, size = 1;
  TESSERA_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  TESSERA_CHECK_MPI(MPI_Comm_size(comm, &size));

  ErrorCode code = ErrorCode::ok;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    code = ErrorCode::internal;
    message = e.what();
  }

  const WaitOptions wait = agreement_wait();
  int failing = code == ErrorCode::ok ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Iallreduce(&failing, &first, 1, MPI_INT, MPI_MIN, comm, &request));
  detail::wait_request(request, wait, {"the error agreement (agree_on_success)", comm});
  if (first == INT_MAX) return;

  int header[2] = {static_cast<int>(code), static_cast<int>(message.size())};
  TESSERA_CHECK_MPI(MPI_Ibcast(header, 2, MPI_INT, first, comm, &request));
  detail::wait_request(request, wait, {"the error agreement's broadcast", comm});
  message.resize(static_cast<std::size_t>(header[1]));
  TESSERA_CHECK_MPI(MPI_Ibcast(message.data(), header[1], MPI_CHAR, first, comm, &request));
  detail::wait_request(request, wait, {"the error agreement's broadcast", comm});
  message += " (on rank " + std::to_string(first) + " of " + std::to_string(size) + ")";
  dump_flight_for_agreement(message);
  throw_error(static_cast<ErrorCode>(header[0]), message);
}

bool same_on_all_ranks(MPI_Comm comm, std::string_view description) {
  int size = 1;
  TESSERA_CHECK_MPI(MPI_Comm_size(comm, &size));
  if (size == 1) return true;
  // min over ranks of (h, ~h) recovers the min and the max of h: every rank reaches the
  // same verdict from one all-reduce.
  const std::uint64_t h = detail::fnv1a64(description);
  std::uint64_t mine[2] = {h, ~h}, least[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Iallreduce(mine, least, 2, MPI_UINT64_T, MPI_MIN, comm, &request));
  detail::wait_request(request, agreement_wait(), {"the agreement check (same_on_all_ranks)", comm});
  return least[0] == h && least[1] == ~h;
}

void require_same_on_all_ranks(MPI_Comm comm, std::string_view description, const std::string& message) {
  if (!same_on_all_ranks(comm, description)) throw InvalidArgument(message);
}

}  // namespace tessera
