#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/request_state.hpp"
#include "tessera/check.hpp"

namespace tessera {

namespace detail {

namespace {

void wait_requests(MPI_Request* requests, int count, const WaitOptions& wait, const WaitSite& site) {
  if (count == 0) return;
  const double timeout = collective_timeout();
  if (wait.policy != WaitPolicy::sleep && timeout <= 0) {
    TESSERA_CHECK_MPI(MPI_Waitall(count, requests, MPI_STATUSES_IGNORE));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    TESSERA_CHECK_MPI(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (timeout > 0) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout) watchdog_abort(site, waited);
    }
    // Yield the core to the rank that has work; MPI_Testall still drives progress.
    if (wait.policy == WaitPolicy::sleep) std::this_thread::sleep_for(wait.sleep_interval);
  }
}

}  // namespace

void wait_request(MPI_Request& request, const WaitOptions& wait, const WaitSite& site) {
  if (request == MPI_REQUEST_NULL) return;
  wait_requests(&request, 1, wait, site);
}

void wait_all(std::vector<MPI_Request>& requests, const WaitOptions& wait, const WaitSite& site) {
  wait_requests(requests.data(), static_cast<int>(requests.size()), wait, site);
}

}  // namespace detail

CommRequest::CommRequest() = default;
CommRequest::CommRequest(std::unique_ptr<State> state) : state_(std::move(state)) {}
CommRequest::CommRequest(CommRequest&&) noexcept = default;

CommRequest& CommRequest::operator=(CommRequest&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->complete) {
      try {
        wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: pending collective failed while being replaced: %s\n", e.what());
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

CommRequest::~CommRequest() {
  if (state_ && !state_->complete) {
    // A destructor cannot throw; waiting keeps MPI from writing into freed buffers.
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: pending collective failed in ~CommRequest: %s\n", e.what());
    }
  }
}

bool CommRequest::done() const { return !state_ || state_->complete; }

void CommRequest::wait() {
  if (done()) return;
  detail::wait_request(state_->request, state_->wait, state_->site);
  state_->complete = true;
  if (state_->finish) state_->finish();
  state_->keep_alive.clear();
  if (state_->flight.ring) state_->flight.ring->complete(state_->flight.ticket);
}

bool CommRequest::test() {
  if (done()) return true;
  if (state_->ready && !state_->ready()) return false;
  int flag = 0;
  TESSERA_CHECK_MPI(MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE));
  if (!flag) return false;
  state_->complete = true;
  if (state_->finish) state_->finish();
  state_->keep_alive.clear();
  if (state_->flight.ring) state_->flight.ring->complete(state_->flight.ticket);
  return true;
}

}  // namespace tessera
