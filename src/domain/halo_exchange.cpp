// HaloExchange's exchange: the state machine (pack, post, wait, unpack) of the forward
// exchange and its adjoint, the same on every device. The plan it runs is built in
// halo_plan.cpp (from the planner's pieces, halo_planner.cpp); the fields are checked
// and agreed in halo_fields.cpp; the buffers and the pack / unpack / zero passes, which
// run on the fields' device, are in halo_buffers.cpp, the MPI datatypes over the fields
// in halo_direct.cpp, and the node-memory path's decisions and answers in
// halo_node_memory.cpp.

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "backend/compute.hpp"
#include "comm/request_state.hpp"
#include "domain/halo_plan.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"
#include "tessera/ops.hpp"

namespace tessera::domain {

namespace {

using halo::HaloRect;
using halo::Transfer;
using tessera::detail::halo_rect_area;
using Plan = HaloExchange::Plan;

int message_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw UnsupportedError("HaloExchange: a halo message of " + std::to_string(bytes) +
                           " bytes exceeds MPI's int count limit");
  }
  return static_cast<int>(bytes);
}

// Posts every receive, then every send: through the transfer's direct datatype when
// `direct` (the forward exchange) and it has one, else through its packed buffer.
void post(Plan& p, std::vector<Transfer>& incoming, std::vector<Transfer>& outgoing, int tag_base, bool direct) {
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  p.requests.clear();
  // Receives first, so a message that arrives early lands in its buffer directly.
  for (Transfer& t : incoming) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (t.via_node) {
      TESSERA_CHECK_MPI(MPI_Irecv(&t.notice, 1, MPI_INT64_T, p.node.node_rank(t.peer), tag_base + t.direction,
                                  p.node.comm(), &r));
    } else if (direct && t.direct != MPI_DATATYPE_NULL) {
      TESSERA_CHECK_MPI(MPI_Irecv(MPI_BOTTOM, 1, t.direct, t.peer, tag_base + t.direction, comm, &r));
    } else {
      p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
      TESSERA_CHECK_MPI(MPI_Irecv(t.buffer.message(), message_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                  tag_base + t.direction, comm, &r));
    }
    p.requests.push_back(r);
  }
  for (Transfer& t : outgoing) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (t.via_node) {
      TESSERA_CHECK_MPI(MPI_Isend(&t.window_offset, 1, MPI_INT64_T, p.node.node_rank(t.peer), tag_base + t.direction,
                                  p.node.comm(), &r));
    } else if (direct && t.direct != MPI_DATATYPE_NULL) {
      TESSERA_CHECK_MPI(MPI_Isend(MPI_BOTTOM, 1, t.direct, t.peer, tag_base + t.direction, comm, &r));
    } else {
      TESSERA_CHECK_MPI(MPI_Isend(t.buffer.message(), message_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                  tag_base + t.direction, comm, &r));
    }
    p.requests.push_back(r);
  }
}

// Forward and adjoint exchanges are one procedure run in opposite directions. Forward:
// interior rects (sends) are packed and go out, halo rects (recvs) are filled; on the
// host, messages with long rows skip the packing altogether (Plan::prepare_direct: MPI
// reads and writes the fields through a datatype, which the start()/finish() contract
// allows: between them the interior is read-only and the halo untouched). The adjoint
// (the transpose) runs every message backwards: halo rects are packed and sent to the
// rank they came from, which adds them into the interior rects it sent (an addition MPI
// cannot do on receipt), and the halo is left zero.
// mirror_odd: the halo cells copied across an odd edge hold the negated values. The
// forward exchange negates them after they arrive, the adjoint before they go back.
void negate_mirrored(const Plan& p, const std::vector<Tensor>& fields) {
  for (const Tensor& field : fields) {
    if (!field.defined()) continue;
    const int d = field.dim();
    for (const HaloRect& r : p.negated) {
      Tensor cells = field.narrow(d - 2, r.lat0, r.rows).narrow(d - 1, r.lon0, r.cols);
      Tensor negated = cells.contiguous().clone();
      tessera::ops::scale(negated, -1.0);
      cells.copy_from(negated);
    }
  }
}

// Checks the fields (agreed when the set changes) and keeps them alive until finish.
void take_fields(Plan& p, const std::vector<Tensor>& fields, bool adjoint) {
  p.prepare_fields(fields, adjoint ? "start_adjoint" : "start");
  // On every rank alike (prepare_fields has agreed the fields' dtypes), before any message.
  if (halo::has_edge(p.spec, EdgePolicy::mirror_odd)) {
    for (const Tensor& field : fields) {
      if (field.defined() && field.dtype() == DType::i64) {
        throw InvalidArgument("HaloExchange (" + p.spec.str() + "): mirror_odd negates values; an i64 field cannot "
                              "take it (exchange it with a plan whose edges copy)");
      }
    }
  }
  // The fields are assigned into the Tensor objects the last exchange left (undefined,
  // but with their shape vectors' room), so a repeated exchange allocates nothing here.
  p.fields.resize(fields.size());
  std::copy(fields.begin(), fields.end(), p.fields.begin());
  p.device = fields.empty() ? Device::host() : fields.front().device();
}

// Packs every outgoing message that is not sent straight from the fields: into this
// rank's node memory, or into its buffer (and the buffer's staging copy).
void pack_outgoing(Plan& p, std::vector<Transfer>& outgoing, bool direct) {
  bool node_packed = false;
  for (Transfer& t : outgoing) {
    if (t.via_node) {
      p.pack(t.rects, p.node.mine() + t.window_offset);
      node_packed = true;
      continue;
    }
    if (direct && t.direct != MPI_DATATYPE_NULL) continue;
    p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
    p.pack(t.rects, t.buffer.packed());
    t.buffer.packed_to_message();
  }
  if (node_packed) p.node.sync();  // the packed bytes before the offsets that announce them
}

// Local work, overlapping the messages in flight: pieces whose source is this rank go
// through the self buffer (forward: interior -> halo; adjoint: halo added back into the
// interior). Forward then zeroes the rows beyond a pole; the adjoint has packed or added
// every halo value, so the transpose leaves zeros behind.
void local_pieces(Plan& p, bool adjoint) {
  std::int64_t self_cells = 0;
  for (const HaloRect& rect : p.self_from) self_cells += halo_rect_area(rect);
  if (self_cells > 0) {
    p.reserve(p.self_buffer, self_cells, /*for_mpi=*/false);
    p.pack(adjoint ? p.self_to : p.self_from, p.self_buffer.packed());
    p.unpack(adjoint ? p.self_from : p.self_to, p.self_buffer.packed(), adjoint);
  }
  p.zero(adjoint ? p.frame : p.zeros);
}

void start_exchange(Plan& p, const std::vector<Tensor>& fields, bool adjoint) {
  take_fields(p, fields, adjoint);
  if (adjoint) negate_mirrored(p, fields);
  std::vector<Transfer>& outgoing = adjoint ? p.recvs : p.sends;
  std::vector<Transfer>& incoming = adjoint ? p.sends : p.recvs;
  const bool direct = !adjoint;
  if (direct) p.prepare_direct();
  pack_outgoing(p, outgoing, direct);
  // MPI knows nothing of the device's stream. When it addresses device memory directly,
  // the pack kernels must be done before it reads the send buffers, and the previous
  // exchange's unpack kernels before it writes the receive buffers. (Staged copies
  // already wait for the stream; on the host there is nothing to wait for.)
  tessera::detail::compute_for(p.device).synchronize_stream(p.device.index);
  post(p, incoming, outgoing, adjoint ? halo::kAdjointTag : halo::kForwardTag, direct);
  p.mode = adjoint ? Plan::Mode::adjoint : Plan::Mode::forward;
  local_pieces(p, adjoint);
}

void finish_exchange(Plan& p, bool adjoint) {
  const auto expected = adjoint ? Plan::Mode::adjoint : Plan::Mode::forward;
  if (p.mode != expected) {
    throw InvalidArgument(adjoint ? "HaloExchange::finish_adjoint: no adjoint exchange is in flight (call "
                                    "start_adjoint() first)"
                                  : "HaloExchange::finish: no forward exchange is in flight (call start() first)");
  }
  // Whatever happens, the plan is idle afterwards: a failed wait leaves nothing to finish.
  p.mode = Plan::Mode::idle;
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  tessera::detail::wait_all(p.requests, p.wait,
                            {adjoint ? "the halo exchange's adjoint messages" : "the halo exchange's messages", comm});
  std::vector<Transfer>& incoming = adjoint ? p.sends : p.recvs;
  bool node_read = false;
  for (const Transfer& t : incoming) {
    if (t.via_node) {
      if (!node_read) p.node.sync();  // the sender's packed bytes, announced by its offset
      node_read = true;
      p.unpack(t.rects, p.node.of(t.peer) + t.notice, adjoint);
      continue;
    }
    if (!adjoint && t.direct != MPI_DATATYPE_NULL) continue;  // MPI wrote the halo itself
    t.buffer.message_to_packed();
    p.unpack(t.rects, t.buffer.packed(), adjoint);
  }
  p.post_node_answers(adjoint);
  if (!adjoint) negate_mirrored(p, p.fields);
  static const Tensor undefined;
  for (Tensor& t : p.fields) t = undefined;  // lets the fields go, keeps the objects for the next exchange
}

}  // namespace

void HaloExchange::start(const std::vector<Tensor>& fields) { start_exchange(*plan_, fields, false); }
void HaloExchange::finish() { finish_exchange(*plan_, false); }
void HaloExchange::start_adjoint(const std::vector<Tensor>& fields) { start_exchange(*plan_, fields, true); }
void HaloExchange::finish_adjoint() { finish_exchange(*plan_, true); }

void HaloExchange::exchange(const std::vector<Tensor>& fields) {
  start(fields);
  finish();
}

void HaloExchange::exchange_adjoint(const std::vector<Tensor>& fields) {
  start_adjoint(fields);
  finish_adjoint();
}

}  // namespace tessera::domain
