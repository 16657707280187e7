#include "comm/node_window.hpp"

#include <exception>
#include <utility>

#include "tessera/check.hpp"
#include "tessera/node.hpp"

namespace tessera::detail {

NodeWindow::NodeWindow(MPI_Comm comm) {
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  node_ = split_by_node(comm, rank);
  // Which communicator ranks are on this node, and their node ranks.
  node_rank_.assign(static_cast<std::size_t>(size), -1);
  MPI_Group comm_group = MPI_GROUP_NULL, node_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &comm_group);
  MPI_Comm_group(node_, &node_group);
  int node_size = 1;
  MPI_Comm_size(node_, &node_size);
  for (int peer = 0; peer < node_size; ++peer) {
    int in_comm = MPI_UNDEFINED;
    MPI_Group_translate_ranks(node_group, 1, &peer, comm_group, &in_comm);
    if (in_comm != MPI_UNDEFINED) node_rank_[static_cast<std::size_t>(in_comm)] = peer;
  }
  MPI_Group_free(&comm_group);
  MPI_Group_free(&node_group);
}

NodeWindow& NodeWindow::operator=(NodeWindow&& other) noexcept {
  if (this != &other) {
    release();
    node_ = std::exchange(other.node_, MPI_COMM_NULL);
    window_ = std::exchange(other.window_, MPI_WIN_NULL);
    node_rank_ = std::move(other.node_rank_);
    segments_ = std::move(other.segments_);
    mine_ = std::exchange(other.mine_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool NodeWindow::on_node(int peer) const {
  return peer >= 0 && static_cast<std::size_t>(peer) < node_rank_.size() && node_rank_[static_cast<std::size_t>(peer)] >= 0;
}

void NodeWindow::allocate(std::size_t bytes) {
  free_window();
  // Each rank's segment on its own pages (near its own core), not one block for all.
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* base = nullptr;
  const int status = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, node_, &base, &window_);
  MPI_Info_free(&info);
  TESSERA_CHECK_MPI(status);
  TESSERA_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  mine_ = static_cast<std::byte*>(base);
  bytes_ = bytes;
  segments_.assign(node_rank_.size(), nullptr);
  for (std::size_t r = 0; r < node_rank_.size(); ++r) {
    if (node_rank_[r] < 0) continue;
    MPI_Aint size = 0;
    int unit = 0;
    void* where = nullptr;
    TESSERA_CHECK_MPI(MPI_Win_shared_query(window_, node_rank_[r], &size, &unit, &where));
    segments_[r] = static_cast<const std::byte*>(where);
  }
}

const std::byte* NodeWindow::of(int peer) const {
  return on_node(peer) && static_cast<std::size_t>(peer) < segments_.size() ? segments_[static_cast<std::size_t>(peer)]
                                                                           : nullptr;
}

void NodeWindow::sync() const {
  if (window_ != MPI_WIN_NULL) TESSERA_CHECK_MPI(MPI_Win_sync(window_));
}

void NodeWindow::free_window() noexcept {
  if (window_ == MPI_WIN_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Freeing is collective over the node: while an exception unwinds this rank alone,
  // the window is left to MPI_Finalize rather than wait for ranks that may never come.
  if (!finalized && std::uncaught_exceptions() == 0) {
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }
  window_ = MPI_WIN_NULL;
  mine_ = nullptr;
  bytes_ = 0;
  segments_.clear();
}

void NodeWindow::release() noexcept {
  free_window();
  if (node_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && std::uncaught_exceptions() == 0) MPI_Comm_free(&node_);
    node_ = MPI_COMM_NULL;
  }
  node_rank_.clear();
}

}  // namespace tessera::detail
