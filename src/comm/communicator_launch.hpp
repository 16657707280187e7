#pragma once
// Communicator::launch, the one place an MPI operation is posted (statistics, the flight
// recorder, the watchdog's wait site, the wait policy). A member template, defined here
// so that the collectives (communicator.cpp) and the point-to-point calls
// (communicator_point_to_point.cpp) instantiate the same definition.

#include <memory>
#include <utility>

#include "comm/flight_recorder.hpp"
#include "comm/request_state.hpp"
#include "comm/watchdog.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"

namespace tessera {

template <class Post, class Finish>
CommRequest Communicator::launch(const char* name, const detail::FlightOp& what, bool blocking, Post&& post,
                                 Finish&& finish, std::initializer_list<Tensor> keep_alive) {
  ++stats_.mpi_calls;
  stats_.bytes += what.bytes;
  std::uint64_t ticket = 0;
  const std::int64_t call = note_posted(what, false, ticket);
  const detail::WaitSite site = call > 0 ? detail::WaitSite{name, comm_, arrivals_, call} : detail::WaitSite{name, comm_};
  if (blocking && wait_.policy == WaitPolicy::spin && !arrivals_) {
    // The latency path: the plain blocking call, no request state to allocate.
    const int status = post(nullptr);
    if (status != MPI_SUCCESS) detail::throw_mpi_error(status, name, __FILE__, __LINE__);
    if (flight_) flight_->complete(ticket);
    finish();
    return {};
  }
  auto state = std::make_unique<CommRequest::State>();
  state->wait = wait_;
  state->finish = std::forward<Finish>(finish);
  state->keep_alive = keep_alive;
  state->site = site;
  if (ticket != 0) state->flight = {flight_, ticket};
  const int status = post(&state->request);
  if (status != MPI_SUCCESS) {
    state->complete = true;  // nothing pending: do not wait in the destructor
    detail::throw_mpi_error(status, name, __FILE__, __LINE__);
  }
  CommRequest req(std::move(state));
  if (blocking) req.wait();
  return req;
}

}  // namespace tessera
