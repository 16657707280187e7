// Which ranks of the code's communicator run the model (ModelRanks: one per GPU per node,
// a count, or a list), resolved and agreed on every rank; and the node of every code
// rank, which per_node placement and the node-aware route both use.

#include "tessera/domain/redistribution.hpp"

#include "comm/request_state.hpp"
#include "domain/redistribution_plan.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"
#include "tessera/node.hpp"

namespace tessera::domain {

std::string ModelRanks::str() const {
  switch (kind) {
    case Kind::per_node: return "per_node";
    case Kind::count: return "count " + std::to_string(m);
    case Kind::list: return "list " + ranks_str(ranks);
  }
  return "?";
}

CodeNodes redistribution_detail::code_nodes(Communicator& comm, bool count_gpus) {
  const MPI_Comm c = comm.mpi_comm();
  const WaitOptions& wait = comm.wait_options();
  MPI_Comm node = split_by_node(c, comm.rank());
  // {-lowest rank, GPUs} of the node in one max-reduction.
  int mine[2] = {-comm.rank(), count_gpus ? std::max(0, cuda_device_count()) : 0}, node_max[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  const int status = MPI_Iallreduce(mine, node_max, 2, MPI_INT, MPI_MAX, node, &request);
  if (status == MPI_SUCCESS) {
    try {
      detail::wait_request(request, wait, {"Redistribution: the node's first rank and GPU count (MPI_Iallreduce)", node});
    } catch (...) {
      MPI_Comm_free(&node);
      throw;
    }
  }
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(status);
  const int facts[2] = {-node_max[0], node_max[1]};
  std::vector<int> all(2 * static_cast<std::size_t>(comm.size()));
  TESSERA_CHECK_MPI(MPI_Iallgather(facts, 2, MPI_INT, all.data(), 2, MPI_INT, c, &request));
  detail::wait_request(request, wait, {"Redistribution: the node of every rank (MPI_Iallgather)", c});
  CodeNodes nodes;
  for (std::size_t r = 0; r < static_cast<std::size_t>(comm.size()); ++r) {
    nodes.node_of.push_back(all[2 * r]);
    nodes.gpus_of.push_back(all[2 * r + 1]);
  }
  return nodes;
}

namespace {

// per_node: on each node (its ranks in code-rank order, L of them, seeing G GPUs) one
// model rank per GPU at node-local ranks floor(k L / G), k < G; its first rank on a node
// without GPUs.
std::vector<int> per_node_ranks(Communicator& comm) {
  const CodeNodes nodes = code_nodes(comm, /*count_gpus=*/true);
  const int n = comm.size();
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    int local_rank = 0, local_size = 0;
    for (int q = 0; q < n; ++q) {
      if (nodes.node_of[static_cast<std::size_t>(q)] != nodes.node_of[ur]) continue;
      if (q < r) ++local_rank;
      ++local_size;
    }
    const int per_node = std::clamp(nodes.gpus_of[ur], 1, local_size);
    for (int k = 0; k < per_node; ++k) {
      if (static_cast<int>(static_cast<std::int64_t>(k) * local_size / per_node) == local_rank) {
        ranks.push_back(r);
        break;
      }
    }
  }
  return ranks;
}

// count and list: local arithmetic and checks.
std::vector<int> explicit_ranks(int n, const ModelRanks& spec) {
  if (spec.kind == ModelRanks::Kind::count) {
    if (spec.m < 1) {
      throw InvalidArgument("Redistribution: model rank count M = " + std::to_string(spec.m) + " must be >= 1");
    }
    if (spec.m > n) {
      throw InvalidArgument("Redistribution: model rank count M = " + std::to_string(spec.m) + " exceeds the N = " +
                            std::to_string(n) + " ranks of the code's communicator (M > N)");
    }
    std::vector<int> ranks;
    for (int i = 0; i < spec.m; ++i) ranks.push_back(static_cast<int>(static_cast<std::int64_t>(i) * n / spec.m));
    return ranks;
  }
  const std::vector<int>& ranks = spec.ranks;
  if (ranks.empty()) throw InvalidArgument("Redistribution: the model rank list is empty");
  if (ranks.size() > static_cast<std::size_t>(n)) {
    throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " holds M = " +
                          std::to_string(ranks.size()) + " ranks, more than the N = " + std::to_string(n) +
                          " ranks of the code's communicator (M > N)");
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n) {
      throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " names rank " +
                            std::to_string(ranks[i]) + ", outside the code communicator's [0, " + std::to_string(n) +
                            ")");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (ranks[j] == ranks[i]) {
        throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " names rank " +
                              std::to_string(ranks[i]) + " twice (positions " + std::to_string(j) + " and " +
                              std::to_string(i) + "); each model rank is a distinct code rank");
      }
    }
  }
  return ranks;
}

}  // namespace

std::vector<int> resolve_model_ranks(Communicator& comm, const ModelRanks& spec) {
  std::vector<int> ranks;
  // The kind must agree before per_node's collectives, or the ranks would not meet.
  require_same_on_all_ranks(comm.mpi_comm(), spec.kind == ModelRanks::Kind::per_node ? "per_node" : "explicit",
                            "Redistribution: the ranks of the code's communicator chose the model ranks "
                            "differently (per_node on some, a count or list on others)");
  if (spec.kind == ModelRanks::Kind::per_node) {
    ranks = per_node_ranks(comm);
  } else {
    agree_on_success(comm.mpi_comm(), [&] { ranks = explicit_ranks(comm.size(), spec); });
  }
  require_same_on_all_ranks(comm.mpi_comm(), ranks_str(ranks),
                            "Redistribution: the ranks of the code's communicator passed different model ranks");
  return ranks;
}

}  // namespace tessera::domain
