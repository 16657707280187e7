#pragma once
// The argument checks and small helpers that Communicator's collectives
// (communicator.cpp) and its point-to-point calls (communicator_point_to_point.cpp)
// share: one definition of each, so both halves word their errors alike.

#include <climits>
#include <cstdint>
#include <string>

#include "comm/flight_recorder.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera::comm_checks {

inline std::string collective_name(const char* op) { return std::string("Communicator::") + op; }

inline void check_buffer(const Tensor& t, const char* op, const char* role) {
  if (!t.defined()) throw InvalidArgument(collective_name(op) + ": " + role + " tensor is undefined");
  if (!t.is_contiguous()) {
    throw ShapeError(collective_name(op) + ": " + role + " tensor " + t.str() +
                     " is not contiguous; pass contiguous() of it");
  }
  if (t.numel() > INT_MAX) {
    throw UnsupportedError(collective_name(op) + ": " + role + " tensor " + t.str() + " has " +
                           std::to_string(t.numel()) + " elements; MPI counts are limited to " +
                           std::to_string(INT_MAX));
  }
}

inline int count_of(const Tensor& t) { return static_cast<int>(t.numel()); }

// What the flight recorder notes of an operation on `t` (count: elements per rank).
inline detail::FlightOp flight_op(const char* op, const Tensor& t, std::int64_t bytes, int peer = -1, int tag = -1,
                           bool collective = true) {
  return detail::FlightOp{op, collective, t.numel(), t.dtype(), peer, tag, bytes};
}

}  // namespace tessera::comm_checks
