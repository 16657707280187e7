// make_redistribution_pattern: one rank's part of the redistribution plan, from the
// boxes, nodes and model ranks every rank agrees on. No MPI: the constructor in
// redistribution.cpp gathers the inputs, the transfers in redistribution_transfer.cpp
// run the result.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "domain/redistribution_plan.hpp"

namespace tessera::domain::redistribution_detail {
namespace {

// The planning state of one pattern: the inputs and the senders of the model rank being
// planned, per node.
class Planner {
 public:
  explicit Planner(const PatternInputs& in)
      : in_(in),
        n_(static_cast<int>(in.code_boxes.size())),
        m_(static_cast<int>(in.model_ranks.size())),
        senders_(static_cast<std::size_t>(n_)),
        node_models_(static_cast<std::size_t>(n_)) {
    for (int r : in.model_ranks) node_models_[static_cast<std::size_t>(node_of(r))].push_back(r);
  }

  RedistributionPattern plan() {
    count_nodes();
    choose_route();
    for (int i = 0; i < m_; ++i) plan_model_rank(i);
    auto by_peer = [](const Transfer& a, const Transfer& b) { return a.peer < b.peer; };
    for (auto* list : {&p_.to_model_sends, &p_.to_model_recvs, &p_.to_code_sends, &p_.to_code_recvs}) {
      std::sort(list->begin(), list->end(), by_peer);
    }
    count_messages();
    return std::move(p_);
  }

 private:
  int node_of(int r) const { return in_.node_of[static_cast<std::size_t>(r)]; }
  const LocalBox& code_box(int c) const { return in_.code_boxes[static_cast<std::size_t>(c)]; }
  LocalBox model_box(int i) const { return box_of_model_rank(in_.global_lat, in_.global_lon, in_.grid, i); }
  int peer_of(int i) const { return in_.model_ranks[static_cast<std::size_t>(i)]; }

  void count_nodes() {
    std::vector<int> distinct = in_.node_of;
    std::sort(distinct.begin(), distinct.end());
    p_.stats.nodes = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }

  // senders_[node]: the code ranks of `node` with a piece for model rank i, when model
  // rank i runs on another node (node names are code ranks, so N lists).
  void find_remote_senders(int i) {
    for (auto& list : senders_) list.clear();
    const int peer = peer_of(i);
    const LocalBox box = model_box(i);
    for (int c = 0; c < n_; ++c) {
      if (node_of(c) != node_of(peer) && intersect(code_box(c), box).cells() > 0) {
        senders_[static_cast<std::size_t>(node_of(c))].push_back(c);
      }
    }
  }

  void choose_route() {
    const RedistributionOptions& o = in_.options;
    p_.route = o.route == RedistributionRoute::automatic ? RedistributionRoute::direct : o.route;
    if (o.route == RedistributionRoute::automatic && p_.stats.nodes > 1) {
      std::size_t widest = 0;
      for (int i = 0; i < m_; ++i) {
        find_remote_senders(i);
        for (const auto& list : senders_) widest = std::max(widest, list.size());
      }
      if (widest >= static_cast<std::size_t>(o.node_aware_senders)) p_.route = RedistributionRoute::node_aware;
    }
    node_aware_ = p_.route == RedistributionRoute::node_aware;
    for (auto& list : senders_) list.clear();
  }

  // The relay of (node, model rank i): one of the node's model ranks (spread over them by
  // i), which has the model's work to wait for anyway, else the node's first rank.
  int relay_of(int node, int i) const {
    const std::vector<int>& here = node_models_[static_cast<std::size_t>(node)];
    return here.empty() ? node : here[static_cast<std::size_t>(i) % here.size()];
  }
  // A node's pieces for model rank i are relayed when two or more of its ranks send them.
  bool relayed(int node) const { return node_aware_ && senders_[static_cast<std::size_t>(node)].size() >= 2; }
  Relayed relayed_message(int peer, int node, int i) const {
    Relayed message{peer, senders_[static_cast<std::size_t>(node)], {}, {}, {}};
    for (int c : message.members) message.rects.push_back(intersect(code_box(c), model_box(i)));
    return message;
  }

  // Every piece of model rank i that involves me, as a code rank, as my node's relay and
  // as model rank i.
  void plan_model_rank(int i) {
    const int me = in_.me, peer = peer_of(i), my_node = node_of(me);
    const LocalBox box = model_box(i);
    const bool replica0 = i < in_.grid.lat * in_.grid.lon;  // replica 0 sends it back
    if (node_aware_) find_remote_senders(i);
    // As a code rank: what model rank i needs of my box.
    const Rect r = intersect(code_box(me), box);
    if (r.cells() > 0) {
      if (peer == me) {
        p_.to_model_self.push_back(r);
        p_.stats.self_cells += r.cells();
        if (replica0) p_.to_code_self.push_back(r);
      } else if (relayed(my_node)) {
        const int relay = relay_of(my_node, i);
        if (relay != me) {  // the relay's own piece goes in its message
          p_.gather_sends.push_back({relay, r, {}, false});
          if (replica0) p_.scatter_recvs.push_back({relay, r, {}, false});
        }
      } else {
        p_.to_model_sends.push_back({peer, r, {}, false});
        if (node_of(peer) != my_node) ++p_.stats.internode_sends;
        if (replica0) p_.to_code_recvs.push_back({peer, r, {}, false});
      }
    }
    // As my node's relay for model rank i.
    if (relayed(my_node) && relay_of(my_node, i) == me) {
      p_.relay_to_model.push_back(relayed_message(peer, my_node, i));
      if (replica0) p_.relay_to_code.push_back(p_.relay_to_model.back());
      ++p_.stats.internode_sends;
      ++p_.stats.relays;
    }
    // As model rank i: what each code rank, or each relay, holds of my box.
    if (peer != me) return;
    for (int c = 0; c < n_; ++c) {
      const Rect piece = intersect(code_box(c), box);
      if (c == me || piece.cells() == 0 || relayed(node_of(c))) continue;
      p_.to_model_recvs.push_back({c, piece, {}, false});
      if (replica0) p_.to_code_sends.push_back({c, piece, {}, false});
    }
    for (int node = 0; node < n_; ++node) {
      if (!relayed(node)) continue;
      p_.relayed_to_model_recvs.push_back(relayed_message(relay_of(node, i), node, i));
      if (replica0) p_.relayed_to_code_sends.push_back(p_.relayed_to_model_recvs.back());
    }
  }

  // MPI messages per direction; a relay also receives (sends) a first stage from (to)
  // each member but itself.
  void count_messages() {
    auto first_stage = [&](const std::vector<Relayed>& list) {
      int count = 0;
      for (const Relayed& x : list) {
        count += static_cast<int>(std::count_if(x.members.begin(), x.members.end(), [&](int c) { return c != in_.me; }));
      }
      return count;
    };
    p_.stats.to_model_sends = static_cast<int>(p_.to_model_sends.size() + p_.gather_sends.size() + p_.relay_to_model.size());
    p_.stats.to_model_recvs =
        static_cast<int>(p_.to_model_recvs.size() + p_.relayed_to_model_recvs.size()) + first_stage(p_.relay_to_model);
    p_.stats.to_code_sends =
        static_cast<int>(p_.to_code_sends.size() + p_.relayed_to_code_sends.size()) + first_stage(p_.relay_to_code);
    p_.stats.to_code_recvs = static_cast<int>(p_.to_code_recvs.size() + p_.scatter_recvs.size() + p_.relay_to_code.size());
  }

  const PatternInputs& in_;
  const int n_, m_;
  std::vector<std::vector<int>> senders_;
  std::vector<std::vector<int>> node_models_;  // each node's model ranks, in model-rank order
  bool node_aware_ = false;
  RedistributionPattern p_;
};

}  // namespace

RedistributionPattern make_redistribution_pattern(const PatternInputs& in) { return Planner(in).plan(); }

}  // namespace tessera::domain::redistribution_detail
