// The node-memory path of the halo exchange: which messages a node's ranks pass through
// their shared segments instead of MPI (decided per agreed field set), and the empty
// "read" answers that tell a sender its segment is free to pack into again. The
// segments themselves are comm/node_window's; the exchange packs into and unpacks from
// them in halo_exchange.cpp.

#include <algorithm>
#include <cstdio>
#include <exception>

#include "comm/request_state.hpp"
#include "domain/halo_plan.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

void HaloExchange::Plan::prepare_node_memory(bool all_host) {
  std::size_t bytes = 0;
  for (std::vector<halo::Transfer>* list : {&sends, &recvs}) {
    std::size_t offset = 0;  // outgoing regions of one direction (forward: sends; adjoint: recvs)
    for (halo::Transfer& t : *list) {
      const std::size_t message = message_bytes(t.cells);
      t.via_node = all_host && node.on_node(t.peer) && message >= kNodeMemoryMinBytes;
      if (!t.via_node) continue;
      t.window_offset = static_cast<std::int64_t>(offset);
      offset += (message + 63) & ~std::size_t{63};  // each region on its own cache lines
    }
    bytes = std::max(bytes, offset);
  }
  stats.node_memory_messages =
      static_cast<int>(std::count_if(sends.begin(), sends.end(), [](const halo::Transfer& t) { return t.via_node; }));
  node.allocate(bytes);  // every node rank, together (prepare_fields' agreement reaches all of them)
}

// Tell each sender its bytes are read, and ask each receiver for the same answer,
// awaited before this plan packs again (await_node_answers), not here: ranks may finish
// the exchanges of two plans in different orders, and a wait here for a peer that
// finishes the other plan first would wait for ever. The answers go over the plan's own
// node communicator (as the offsets do), so no plan takes another's.
void HaloExchange::Plan::post_node_answers(bool adjoint) {
  const std::vector<halo::Transfer>& incoming = adjoint ? sends : recvs;
  const std::vector<halo::Transfer>& outgoing = adjoint ? recvs : sends;
  const int done_tag = adjoint ? halo::kAdjointReadTag : halo::kForwardReadTag;
  for (const halo::Transfer& t : incoming) {
    if (!t.via_node) continue;
    done_requests.push_back(MPI_REQUEST_NULL);
    TESSERA_CHECK_MPI(MPI_Isend(nullptr, 0, MPI_BYTE, node.node_rank(t.peer), done_tag + t.direction, node.comm(),
                                &done_requests.back()));
  }
  for (const halo::Transfer& t : outgoing) {
    if (!t.via_node) continue;
    done_requests.push_back(MPI_REQUEST_NULL);
    TESSERA_CHECK_MPI(MPI_Irecv(nullptr, 0, MPI_BYTE, node.node_rank(t.peer), done_tag + t.direction, node.comm(),
                                &done_requests.back()));
  }
}

void HaloExchange::Plan::await_node_answers() {
  if (done_requests.empty()) return;
  tessera::detail::wait_all(done_requests, wait,
                            {"the halo exchange's node-memory read answers", decomposition.comm().mpi_comm()});
  done_requests.clear();
}

void HaloExchange::Plan::settle_node_answers() noexcept {
  if (done_requests.empty()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (std::uncaught_exceptions() == 0) {
    try {
      await_node_answers();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: ~HaloExchange: %s\n", e.what());
    }
  }
  // Unwinding (or the wait failed): a peer may never answer; drop the requests instead.
  for (MPI_Request& r : done_requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);  // an unmatched receive is withdrawn; a sent answer completes anyway
    MPI_Request_free(&r);
  }
  done_requests.clear();
}

}  // namespace tessera::domain
