// Redistribution: the plan (box intersections between the code's decomposition and the
// model's layout, one message per rank pair and direction), built once and agreed on
// every rank. The transfers that run it are in redistribution_transfer.cpp, the choice of
// model ranks in model_ranks.cpp.

#include "tessera/domain/redistribution.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include "comm/request_state.hpp"
#include "domain/redistribution_plan.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

std::string_view redistribution_route_name(RedistributionRoute route) noexcept {
  switch (route) {
    case RedistributionRoute::direct: return "direct";
    case RedistributionRoute::node_aware: return "node_aware";
    case RedistributionRoute::automatic: return "auto";
  }
  return "?";
}

Redistribution::Redistribution(const Decomposition& code, const ModelRanks& ranks, ModelLayout layout,
                               RedistributionOptions options)
    : plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  p.code = &code;
  Communicator& comm = code.comm();
  p.model_ranks = resolve_model_ranks(comm, ranks);
  const int m = static_cast<int>(p.model_ranks.size());
  agree_on_success(comm.mpi_comm(), [&] {
    if (layout.replicas < 1 || m % layout.replicas != 0) {
      throw InvalidArgument("Redistribution: replicas = " + std::to_string(layout.replicas) +
                            " must be >= 1 and divide the M = " + std::to_string(m) + " model ranks");
    }
    const int d = m / layout.replicas;
    ProcessGrid g = layout.grid;
    if (g.lat == 0 && g.lon == 0) g = ProcessGrid{d, 1};
    if (g.lat < 1 || g.lon < 1 || static_cast<std::int64_t>(g.lat) * g.lon != d) {
      throw InvalidArgument("Redistribution: the model grid " + g.labelled_str() + " must hold the " + std::to_string(d) +
                            " domain ranks of the model (M = " + std::to_string(m) + " / replicas " +
                            std::to_string(layout.replicas) + ")");
    }
    if (g.lat > code.global_lat() || g.lon > code.global_lon()) {
      throw InvalidArgument("Redistribution: the model grid " + g.labelled_str() + " leaves a model rank without a cell of the " +
                            std::to_string(code.global_lat()) + " x " + std::to_string(code.global_lon()) + " grid");
    }
    p.grid = g;
    p.replicas = layout.replicas;
  });
  require_same_on_all_ranks(comm.mpi_comm(), p.str(),
                            "Redistribution: the ranks of the code's communicator passed different model layouts");

  const int me = comm.rank();
  for (int i = 0; i < m; ++i) {
    if (p.model_ranks[static_cast<std::size_t>(i)] == me) p.model_rank = i;
  }
  // The model's communicator, in model-rank order.
  MPI_Comm split = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split(comm.mpi_comm(), p.model_rank >= 0 ? 0 : MPI_UNDEFINED,
                                   std::max(p.model_rank, 0), &split));
  if (split != MPI_COMM_NULL) p.model_comm.emplace(Communicator::adopt(split, comm.wait_options()));

  // Where every code rank runs, and the route.
  agree_on_success(comm.mpi_comm(), [&] {
    if (options.node_aware_senders < 2) {
      throw InvalidArgument("Redistribution: RedistributionOptions::node_aware_senders = " +
                            std::to_string(options.node_aware_senders) +
                            " must be >= 2 (a pair with one sender has nothing to gather)");
    }
  });
  require_same_on_all_ranks(comm.mpi_comm(),
                            std::string(redistribution_route_name(options.route)) + " from " +
                                std::to_string(options.node_aware_senders),
                            "Redistribution: the ranks of the code's communicator chose different routes "
                            "(RedistributionOptions::route, node_aware_senders)");
  const int n = code.size();
  const CodeNodes nodes = code_nodes(comm, /*count_gpus=*/false);  // the route needs nodes only
  auto node_of = [&](int r) { return nodes.node_of[static_cast<std::size_t>(r)]; };
  {
    std::vector<int> distinct = nodes.node_of;
    std::sort(distinct.begin(), distinct.end());
    p.stats.nodes = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  // senders[node]: the code ranks of `node` with a piece for model rank i, when model
  // rank i runs on another node (node names are code ranks, so N lists).
  std::vector<std::vector<int>> senders(static_cast<std::size_t>(n));
  auto remote_senders = [&](int i) {
    for (auto& list : senders) list.clear();
    const int peer = p.model_ranks[static_cast<std::size_t>(i)];
    const LocalBox box = p.box_of_model(i);
    for (int c = 0; c < n; ++c) {
      if (node_of(c) != node_of(peer) && intersect(code.box_of(c), box).cells() > 0) {
        senders[static_cast<std::size_t>(node_of(c))].push_back(c);
      }
    }
  };
  p.route = options.route == RedistributionRoute::automatic ? RedistributionRoute::direct : options.route;
  if (options.route == RedistributionRoute::automatic && p.stats.nodes > 1) {
    std::size_t widest = 0;
    for (int i = 0; i < m; ++i) {
      remote_senders(i);
      for (const auto& list : senders) widest = std::max(widest, list.size());
    }
    if (widest >= static_cast<std::size_t>(options.node_aware_senders)) p.route = RedistributionRoute::node_aware;
  }
  const bool node_aware = p.route == RedistributionRoute::node_aware;
  for (auto& list : senders) list.clear();
  // The relay of (node, model rank i): one of the node's model ranks (spread over them by
  // i), which has the model's work to wait for anyway, else the node's first rank.
  std::vector<std::vector<int>> node_models(static_cast<std::size_t>(n));
  for (int r : p.model_ranks) node_models[static_cast<std::size_t>(node_of(r))].push_back(r);
  auto relay_of = [&](int node, int i) {
    const std::vector<int>& here = node_models[static_cast<std::size_t>(node)];
    return here.empty() ? node : here[static_cast<std::size_t>(i) % here.size()];
  };
  // A node's pieces for model rank i are relayed when two or more of its ranks send them.
  auto relayed = [&](int node) { return node_aware && senders[static_cast<std::size_t>(node)].size() >= 2; };
  auto relayed_message = [&](int peer, int node, int i) {
    Relayed message{peer, senders[static_cast<std::size_t>(node)], {}, {}, {}};
    for (int c : message.members) message.rects.push_back(intersect(code.box_of(c), p.box_of_model(i)));
    return message;
  };

  // Every piece. The direct lists end in ascending peer order on both ends (the pack
  // order of a message is fixed by the fields, so one rect per message is all the ends
  // must agree on); the relayed ones in model-rank order.
  const LocalBox mine = code.box();
  const int my_node = node_of(me);
  for (int i = 0; i < m; ++i) {
    const int peer = p.model_ranks[static_cast<std::size_t>(i)];
    const LocalBox model_box = p.box_of_model(i);
    const bool replica0 = i < p.domain_ranks();  // replica 0 sends it back
    if (node_aware) remote_senders(i);
    // As a code rank: what model rank i needs of my box.
    const Rect r = intersect(mine, model_box);
    if (r.cells() > 0) {
      if (peer == me) {
        p.to_model_self.push_back(r);
        p.stats.self_cells += r.cells();
        if (replica0) p.to_code_self.push_back(r);
      } else if (relayed(my_node)) {
        const int relay = relay_of(my_node, i);
        if (relay != me) {  // the relay's own piece goes in its message
          p.gather_sends.push_back({relay, r, {}, false});
          if (replica0) p.scatter_recvs.push_back({relay, r, {}, false});
        }
      } else {
        p.to_model_sends.push_back({peer, r, {}, false});
        if (node_of(peer) != my_node) ++p.stats.internode_sends;
        if (replica0) p.to_code_recvs.push_back({peer, r, {}, false});
      }
    }
    // As my node's relay for model rank i.
    if (relayed(my_node) && relay_of(my_node, i) == me) {
      p.relay_to_model.push_back(relayed_message(peer, my_node, i));
      if (replica0) p.relay_to_code.push_back(p.relay_to_model.back());
      ++p.stats.internode_sends;
      ++p.stats.relays;
    }
    // As model rank i: what each code rank, or each relay, holds of my box.
    if (peer != me) continue;
    for (int c = 0; c < n; ++c) {
      const Rect piece = intersect(code.box_of(c), model_box);
      if (c == me || piece.cells() == 0 || relayed(node_of(c))) continue;
      p.to_model_recvs.push_back({c, piece, {}, false});
      if (replica0) p.to_code_sends.push_back({c, piece, {}, false});
    }
    for (int node = 0; node < n; ++node) {
      if (!relayed(node)) continue;
      p.relayed_to_model_recvs.push_back(relayed_message(relay_of(node, i), node, i));
      if (replica0) p.relayed_to_code_sends.push_back(p.relayed_to_model_recvs.back());
    }
  }
  auto by_peer = [](const Transfer& a, const Transfer& b) { return a.peer < b.peer; };
  for (auto* list : {&p.to_model_sends, &p.to_model_recvs, &p.to_code_sends, &p.to_code_recvs}) {
    std::sort(list->begin(), list->end(), by_peer);
  }
  // A relay's first stage: a message from each member but itself.
  auto first_stage = [&](const std::vector<Relayed>& list) {
    int count = 0;
    for (const Relayed& x : list) count += static_cast<int>(std::count_if(x.members.begin(), x.members.end(), [&](int c) { return c != me; }));
    return count;
  };
  p.stats.to_model_sends = static_cast<int>(p.to_model_sends.size() + p.gather_sends.size() + p.relay_to_model.size());
  p.stats.to_model_recvs =
      static_cast<int>(p.to_model_recvs.size() + p.relayed_to_model_recvs.size()) + first_stage(p.relay_to_model);
  p.stats.to_code_sends =
      static_cast<int>(p.to_code_sends.size() + p.relayed_to_code_sends.size()) + first_stage(p.relay_to_code);
  p.stats.to_code_recvs = static_cast<int>(p.to_code_recvs.size() + p.scatter_recvs.size() + p.relay_to_code.size());
}

Redistribution::~Redistribution() {
  if (plan_ && plan_->mode != Plan::Mode::idle) {
    // A destructor cannot throw; completing keeps MPI from touching freed buffers.
    try {
      finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: redistribution in flight failed in ~Redistribution: %s\n", e.what());
    }
  }
}

Redistribution::Redistribution(Redistribution&&) noexcept = default;
Redistribution& Redistribution::operator=(Redistribution&& other) noexcept {
  if (this != &other) {
    Redistribution dying(std::move(*this));  // completes anything in flight
    plan_ = std::move(other.plan_);
  }
  return *this;
}

const Decomposition& Redistribution::code() const { return *plan_->code; }
const std::vector<int>& Redistribution::model_ranks() const { return plan_->model_ranks; }
int Redistribution::model_size() const { return static_cast<int>(plan_->model_ranks.size()); }
const ProcessGrid& Redistribution::model_grid() const { return plan_->grid; }
int Redistribution::replicas() const { return plan_->replicas; }
bool Redistribution::is_model_rank() const { return plan_->model_rank >= 0; }
int Redistribution::model_rank() const { return plan_->model_rank; }
const RedistributionStats& Redistribution::stats() const { return plan_->stats; }
RedistributionRoute Redistribution::route() const { return plan_->route; }
bool Redistribution::in_flight() const { return plan_->mode != Plan::Mode::idle; }
void Redistribution::forget_fields() { plan_->validated.reset(); }
std::string Redistribution::str() const { return plan_->str(); }

Communicator& Redistribution::model_comm() const {
  if (!plan_->model_comm) {
    throw InvalidArgument("Redistribution::model_comm: code rank " + std::to_string(plan_->code->rank()) +
                          " is not a model rank " + ranks_str(plan_->model_ranks));
  }
  return *plan_->model_comm;
}

LocalBox Redistribution::model_box_of(int m) const {
  if (m < 0 || m >= model_size()) {
    throw InvalidArgument("Redistribution::model_box_of: model rank " + std::to_string(m) + " is outside [0, " +
                          std::to_string(model_size()) + ")");
  }
  return plan_->box_of_model(m);
}

LocalBox Redistribution::model_box() const {
  if (!is_model_rank()) {
    throw InvalidArgument("Redistribution::model_box: code rank " + std::to_string(plan_->code->rank()) +
                          " is not a model rank " + ranks_str(plan_->model_ranks));
  }
  return plan_->box_of_model(plan_->model_rank);
}

Shape Redistribution::model_shape(const Shape& leading) const {
  const LocalBox b = model_box();
  Shape s = leading;
  s.push_back(b.lat.length);
  s.push_back(b.lon.length);
  return s;
}

}  // namespace tessera::domain
