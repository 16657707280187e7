// Which ranks of the code's communicator run the model (ModelRanks: one per GPU per node,
// a count, or a list), resolved and agreed on every rank.

#include "tessera/domain/redistribution.hpp"

#include "comm/request_state.hpp"
#include "domain/redistribution_plan.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

std::string ModelRanks::str() const {
  switch (kind) {
    case Kind::per_node: return "per_node";
    case Kind::count: return "count " + std::to_string(m);
    case Kind::list: return "list " + ranks_str(ranks);
  }
  return "?";
}

namespace {

// per_node: the node's GPU count (the most any of its ranks sees: with --gpus-per-node
// every rank sees them all), one model rank per GPU spread over the node's ranks, or its
// first rank on a node without GPUs. Collective; every wait under the policy.
std::vector<int> per_node_ranks(Communicator& comm) {
  const MPI_Comm c = comm.mpi_comm();
  const WaitOptions& wait = comm.wait_options();
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node));
  int local_rank = 0, local_size = 1, gpus = std::max(0, cuda_device_count());
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  int node_gpus = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  const int status = MPI_Iallreduce(&gpus, &node_gpus, 1, MPI_INT, MPI_MAX, node, &request);
  if (status == MPI_SUCCESS) {
    try {
      detail::wait_request(request, wait, {"Redistribution: the node's GPU count (MPI_Iallreduce)", node});
    } catch (...) {
      MPI_Comm_free(&node);
      throw;
    }
  }
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(status);
  const int per_node = std::clamp(node_gpus, 1, local_size);
  int mine = 0;
  for (int k = 0; k < per_node; ++k) {
    if (static_cast<int>(static_cast<std::int64_t>(k) * local_size / per_node) == local_rank) mine = 1;
  }
  std::vector<int> flags(static_cast<std::size_t>(comm.size()));
  TESSERA_CHECK_MPI(MPI_Iallgather(&mine, 1, MPI_INT, flags.data(), 1, MPI_INT, c, &request));
  detail::wait_request(request, wait, {"Redistribution: the model ranks of each node (MPI_Iallgather)", c});
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (flags[static_cast<std::size_t>(r)]) ranks.push_back(r);
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
