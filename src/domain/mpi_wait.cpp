#include "domain/mpi_wait.hpp"

#include <thread>

#include "tessera/check.hpp"
#include "tessera/error.hpp"

namespace tessera::domain::detail {

void wait_all(std::vector<MPI_Request>& requests, WaitPolicy policy) {
  if (requests.empty()) return;
  const int count = static_cast<int>(requests.size());
  if (policy != WaitPolicy::sleep) {
    TESSERA_CHECK_MPI(MPI_Waitall(count, requests.data(), MPI_STATUSES_IGNORE));
    return;
  }
  const auto interval = resolve_sleep_interval(std::chrono::microseconds(20));
  for (;;) {
    int done = 0;
    TESSERA_CHECK_MPI(MPI_Testall(count, requests.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(interval);
  }
}

void check_same_on_all_ranks(MPI_Comm comm, const std::string& description, const std::string& what) {
  int size = 1;
  TESSERA_CHECK_MPI(MPI_Comm_size(comm, &size));
  if (size == 1) return;
  // FNV-1a of the description; min of (h, ~h) over ranks recovers min and max of h, so
  // every rank reaches the same verdict from one all-reduce.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : description) h = (h ^ c) * 1099511628211ull;
  std::uint64_t mine[2] = {h, ~h}, least[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Iallreduce(mine, least, 2, MPI_UINT64_T, MPI_MIN, comm, &request));
  std::vector<MPI_Request> requests{request};
  wait_all(requests, WaitPolicy::sleep);  // planning is off the hot path
  if (least[0] != h || least[1] != ~h) {
    // The same text on every rank (the rule for collectives), so no rank-local detail.
    throw InvalidArgument(what + ": the ranks of the domain communicator passed different arguments");
  }
}

}  // namespace tessera::domain::detail
