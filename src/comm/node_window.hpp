#pragma once
// Private: memory that the ranks of a communicator sharing a node read from each other
// with plain loads, through one MPI shared-memory window (MPI_Win_allocate_shared over
// split_by_node, so emulated nodes, TESSERA_NODE_SIZE, count as separate nodes). The
// window is held in one passive epoch (lock_all) for its life; whoever writes a
// segment calls sync() and then tells its readers by a message, and a reader calls
// sync() after that message and before its loads: the MPI memory model's order for
// shared windows. The halo exchange moves on-node messages through it, and the
// collective watchdog keeps its arrival counters in it.

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace tessera::detail {

class NodeWindow {
 public:
  NodeWindow() = default;  // no node communicator: on_node() is false for everyone
  // Collective over `comm`: splits it by node (split_by_node). Allocates nothing yet.
  explicit NodeWindow(MPI_Comm comm);
  ~NodeWindow() { release(); }
  NodeWindow(NodeWindow&& other) noexcept { *this = std::move(other); }
  NodeWindow& operator=(NodeWindow&& other) noexcept;
  NodeWindow(const NodeWindow&) = delete;
  NodeWindow& operator=(const NodeWindow&) = delete;

  // Whether rank `peer` of the communicator shares this rank's node (this rank does).
  bool on_node(int peer) const;
  // The node's ranks as a communicator of their own (new for every NodeWindow, so the
  // messages a user sends over it never meet another's), and `peer`'s rank in it.
  MPI_Comm comm() const { return node_; }
  int node_rank(int peer) const { return on_node(peer) ? node_rank_[static_cast<std::size_t>(peer)] : MPI_PROC_NULL; }
  // Collective over the node's ranks: frees the segments (no one may still read them)
  // and gives this rank a segment of `bytes` (each rank its own size, 0 allowed).
  void allocate(std::size_t bytes);
  std::byte* mine() const { return mine_; }
  std::size_t bytes() const { return bytes_; }
  // The segment of communicator rank `peer` (on this node, after allocate()).
  const std::byte* of(int peer) const;
  void sync() const;  // MPI_Win_sync: orders this rank's stores and loads on the window

  // Frees the window and the node communicator (collective over the node; skipped while
  // an exception unwinds, see free_window); idempotent.
  void release() noexcept;

 private:
  void free_window() noexcept;

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<int> node_rank_;  // by communicator rank: its rank on this node, or -1
  std::vector<const std::byte*> segments_;  // by communicator rank, after allocate()
  std::byte* mine_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tessera::detail
