#pragma once
// The redistribution plan's private pieces, shared by its three files: the plan built
// once (redistribution.cpp), the model ranks it is built for (model_ranks.cpp) and the
// transfers that run it (redistribution_transfer.cpp). Not installed.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "tessera/domain/redistribution.hpp"

namespace tessera::domain {

namespace redistribution_detail {


// Tags of the two directions on the code communicator (the halo exchange uses 0x41xx and
// 0x42xx there). Between two ranks there is at most one message per direction and tag;
// node_aware adds the on-node stages, whose several messages between one code rank and
// its relay (one per model rank) are posted in model-rank order on both ends, which MPI's
// non-overtaking rule matches.
constexpr int kToModelTag = 0x4301;
constexpr int kToCodeTag = 0x4302;
constexpr int kGatherTag = 0x4303;   // node_aware, code -> model: a code rank's piece to its relay
constexpr int kScatterTag = 0x4304;  // node_aware, model -> code: the relay's piece to a code rank

// A (lat, lon) rectangle in global indices.
struct Rect {
  std::int64_t lat = 0, nlat = 0, lon = 0, nlon = 0;
  std::int64_t cells() const { return nlat * nlon; }
};

inline Rect intersect(const LocalBox& a, const LocalBox& b) {
  const std::int64_t lat0 = std::max(a.lat.start, b.lat.start), lat1 = std::min(a.lat.end(), b.lat.end());
  const std::int64_t lon0 = std::max(a.lon.start, b.lon.start), lon1 = std::min(a.lon.end(), b.lon.end());
  if (lat1 <= lat0 || lon1 <= lon0) return {};
  return {lat0, lat1 - lat0, lon0, lon1 - lon0};
}

// The part of `field` (leading..., box lat, box lon) covering global `r`.
inline Tensor rect_view(const Tensor& field, const LocalBox& box, const Rect& r) {
  const int d = field.dim();
  return field.narrow(d - 2, r.lat - box.lat.start, r.nlat).narrow(d - 1, r.lon - box.lon.start, r.nlon);
}

inline std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}



// One message: a rectangle exchanged with one peer, every field's part packed in turn.
struct Transfer {
  int peer = 0;
  Rect rect;
  std::vector<std::byte> buffer;   // the packed message, when not direct
  bool direct = false;             // the last transfer moved it in place (in_place_part)
};

// node_aware: one message between a relay and a model rank on another node, carrying the
// pieces of several code ranks of the relay's node, one after the other in `members`
// order (each piece in a Transfer's format).
struct Relayed {
  int peer = 0;                      // the model rank (on the relay) or the relay (on the model rank)
  std::vector<int> members;          // the code ranks whose pieces it carries, ascending
  std::vector<Rect> rects;           // their pieces
  std::vector<std::size_t> offsets;  // of each piece in buffer (the last: the total), per transfer
  std::vector<std::byte> buffer;
};

// What validation of a transfer's fields depends on: a field set with the keys of one
// already validated needs no new (collective) check.
struct FieldKey {
  bool defined = false;
  DType dtype = DType::f32;
  Device device;
  Shape shape;
  bool operator==(const FieldKey&) const = default;
};

struct FieldKeys {
  std::vector<FieldKey> code, model;
  bool operator==(const FieldKeys&) const = default;
};

inline FieldKeys keys_of(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields) {
  FieldKeys keys;
  for (const auto* list : {&code_fields, &model_fields}) {
    for (const Tensor& t : *list) {
      (list == &code_fields ? keys.code : keys.model)
          .push_back(t.defined() ? FieldKey{true, t.dtype(), t.device(), t.shape()} : FieldKey{});
    }
  }
  return keys;
}


// The box model rank m holds: that of domain rank m % D of the model's grid
// (D = grid.lat * grid.lon) over the global grid, whatever its replica.
inline LocalBox box_of_model_rank(std::int64_t global_lat, std::int64_t global_lon, const ProcessGrid& grid, int m) {
  const int d = m % (grid.lat * grid.lon);
  return {shard_range(global_lat, grid.lat, d / grid.lon), shard_range(global_lon, grid.lon, d % grid.lon)};
}

// What the pattern is planned from: facts every rank of the code's communicator knows
// alike (gathered and checked by the Redistribution constructor), and the rank it is for.
struct PatternInputs {
  std::int64_t global_lat = 0, global_lon = 0;
  std::vector<LocalBox> code_boxes;  // by code rank
  std::vector<int> node_of;          // by code rank: its node, named by the node's lowest code rank
  std::vector<int> model_ranks;      // the code rank of each model rank
  ProcessGrid grid;                  // the model's domain grid (resolved: lat, lon >= 1)
  RedistributionOptions options;     // the route asked for and automatic's threshold
  int me = 0;                        // the code rank the pattern is for
};

// One rank's part of the plan: which rectangles it sends and receives, to and from whom,
// in each direction and on each route; no communicator, no buffer yet. Pure arithmetic,
// separate from the exchange that runs it (redistribution_transfer.cpp), so it can be
// tested without MPI. The direct lists end in ascending peer order on both ends (the
// pack order of a message is fixed by the fields, so one rect per message is all the
// ends must agree on); the relayed ones in model-rank order.
struct RedistributionPattern {
  RedistributionRoute route = RedistributionRoute::direct;  // direct or node_aware, never automatic
  // Message counts, self cells, nodes and relays (the transfer adds its own counts).
  RedistributionStats stats;

  // Code -> model: sends as a code rank, receives as a model rank; self rects (both).
  std::vector<Transfer> to_model_sends, to_model_recvs;
  std::vector<Rect> to_model_self;
  // Model -> code (replica 0 sends).
  std::vector<Transfer> to_code_sends, to_code_recvs;
  std::vector<Rect> to_code_self;
  // node_aware's relayed pieces (the lists above then hold only the direct ones), each
  // list in model-rank order. Code -> model: a code rank's pieces to its relays
  // (gather_sends), the relay's combined messages (relay_to_model: first stage received
  // into its buffer, then sent on), the model rank's receipt of them. Model -> code: the
  // model rank's combined messages, the relay's receipt (relay_to_code: then handed on
  // piece by piece), each code rank's pieces from its relays (scatter_recvs).
  std::vector<Transfer> gather_sends, scatter_recvs;
  std::vector<Relayed> relay_to_model, relayed_to_model_recvs;
  std::vector<Relayed> relayed_to_code_sends, relay_to_code;
};

// Plans `in.me`'s part of the redistribution (redistribution_pattern.cpp). The route:
// automatic becomes node_aware when the code ranks span several nodes and some node
// holds at least options.node_aware_senders code ranks with a piece for one model rank
// on another node, direct otherwise.
RedistributionPattern make_redistribution_pattern(const PatternInputs& in);

// Where the code's ranks run (model_ranks.cpp): each rank's node, named by its lowest
// code rank, and, with count_gpus, the GPUs its node's ranks see (the most any of them
// sees; 0 without count_gpus, so a CPU-only plan never loads the CUDA plugin), from
// split_by_node (emulated nodes too) and one all-gather. Collective over `comm`; every
// rank must pass the same count_gpus.
struct CodeNodes {
  std::vector<int> node_of, gpus_of;  // by code rank
};
CodeNodes code_nodes(Communicator& comm, bool count_gpus);

}  // namespace redistribution_detail

using namespace redistribution_detail;

// The pattern and what running it needs: the communicators, the transfer in flight.
struct Redistribution::Plan : RedistributionPattern {
  const Decomposition* code = nullptr;
  std::vector<int> model_ranks;
  ProcessGrid grid;
  int replicas = 1;
  int model_rank = -1;
  std::optional<Communicator> model_comm;

  std::vector<MPI_Request> relay_requests;  // a relay's first stage in flight

  enum class Mode { idle, to_model, to_code } mode = Mode::idle;
  std::vector<Tensor> code_fields, model_fields;  // alive while in flight
  std::vector<MPI_Request> requests;
  std::optional<FieldKeys> validated;

  int domain_ranks() const { return grid.lat * grid.lon; }
  LocalBox box_of_model(int m) const { return box_of_model_rank(code->global_lat(), code->global_lon(), grid, m); }
  std::string str() const {
    return shape_str(code->global_shape()) + " over " + code->grid().str() + " -> " +
           std::to_string(model_ranks.size()) + " model ranks " + ranks_str(model_ranks) + " on " + grid.str() +
           " x " + std::to_string(replicas) + (route == RedistributionRoute::node_aware ? ", node_aware" : "");
  }
};

}  // namespace tessera::domain
