#pragma once
// Redistribution: fields of one lat-lon grid moved between two decompositions of it,
// the code's (every rank of a communicator of N ranks, each its box: a Decomposition)
// and a model's, which runs on a subset of M <= N of those ranks with a layout of its
// own. This is what a climate code with 64-128 CPU ranks per node needs to run a
// network on the node's few GPUs: gather each model rank's part from the code ranks
// that hold it, run the model there, and send the result back (docs/coupling.md).
//
// The model's layout: a grid.lat x grid.lon domain grid (latitude bands by default,
// {D, 1}) replicated `replicas` times (the tensor-parallel ranks of a model, which all
// need the same band), M = grid ranks x replicas. Model rank m holds the box of domain
// rank m % D (D = grid.lat * grid.lon), the mesh's rule (domain innermost), so a Mesh of
// tensor degree `replicas` and domain degree D over model_comm() gives each model rank
// exactly the band the plan delivers. Code -> model sends every replica its box; model
// -> code takes each cell from replica 0.
//
// Which ranks run the model (ModelRanks):
//   per_node (default) one rank per visible GPU on each node, spread over the node's
//                      ranks (node-local ranks floor(k L / G), k < G, for L ranks and G
//                      GPUs on the node); one rank per node (its first) on a node
//                      without GPUs;
//   count(M)           M ranks spread evenly over the communicator: ranks floor(i N / M);
//   list(ranks)        the given code ranks, model rank i = ranks[i].
// A bad argument (M < 1, M > N, a rank outside [0, N), a duplicate, a grid that does
// not hold M / replicas ranks or leaves a rank without a cell, ranks that disagree)
// throws the same InvalidArgument, naming the argument, on every rank.
//
// The plan is pure arithmetic once the model ranks are known: every rank intersects its
// code box with every model box. Each (code rank, model rank) pair with a non-empty
// intersection is one MPI message per direction carrying every field's part (all fields
// packed into one buffer, any mix of f32 / f64 / bf16 / i64 and leading dims); a rank
// that is both copies its own part locally. Values are copied, never computed, so a
// round trip code -> model -> code is exact.
//
// A message whose bytes are one contiguous run of a host field (one field whose part is
// contiguous: at M = 1 each code rank's whole box) goes between the field and MPI in
// place; every other is packed row by row into a buffer (one memcpy per row). A derived
// datatype over the rows (as the halo exchange's direct path) was measured slower than
// packing on large fields with MPICH 4.0.2 (docs/coupling.md), so it is not used. The
// bytes on the wire are the same either way, so each end decides alone.
//
// start_*()/finish() split a transfer for overlap, as in the halo exchange: start packs
// and posts, finish waits (detail::wait_all under the code communicator's wait policy:
// MPI_Testall + short sleep on an oversubscribed node) and unpacks. Between them the
// sources must not be written nor the destinations touched. One transfer may be in
// flight per plan. Ranks that are not model ranks pass no model fields (an empty
// vector); while the model runs they wait in finish() of to_code, under the wait policy.
//
// Fields may live on a device: they are packed and staged through host buffers (the plan moves
// whole boxes between ranks; a device-aware path would be an optimisation, not a
// different plan).
//
// Routes (RedistributionOptions::route; docs/coupling.md):
//   direct      every piece travels once, from the code rank that owns it to the model
//               rank that needs it;
//   node_aware  the pieces that several code ranks of one node send to one model rank on
//               another node are first gathered to a relay on their node (one of the
//               node's model ranks when it has any, model rank i relayed by the node's
//               (i mod count)-th, else the node's first rank), which sends them on as one
//               message: one message per (node, model rank) pair crosses between nodes.
//               to_code is the reverse (one message per pair to the relay, which hands
//               each code rank its piece). A pair with one sending rank goes direct. The
//               relay's second stage starts in finish(), after its first stage arrived
//               (waited under the wait policy, as every wait of the plan);
//   automatic   node_aware when the code ranks span several nodes and some node holds at
//               least node_aware_senders (8) code ranks whose pieces go to one model rank
//               on another node (there the relay saves that many network messages for one
//               copy through shared memory), direct otherwise.
// Nodes are split_by_node()'s (tessera/node.hpp), the ones per_node placement uses:
// TESSERA_NODE_SIZE=k emulates nodes of k ranks on one machine. Both routes deliver the
// same bytes, so the results are bit-identical.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

// Which ranks of the code's communicator run the model.
struct ModelRanks {
  enum class Kind { per_node, count, list };
  Kind kind = Kind::per_node;
  int m = 0;               // count
  std::vector<int> ranks;  // list

  static ModelRanks per_node() { return {}; }
  static ModelRanks count(int m) { return {Kind::count, m, {}}; }
  static ModelRanks list(std::vector<int> ranks) { return {Kind::list, 0, std::move(ranks)}; }
  std::string str() const;  // "per_node", "count 2", "list [0, 2]"
};

// The model's layout over its M ranks.
struct ModelLayout {
  // The domain grid; {0, 0}: latitude bands, {M / replicas, 1}.
  ProcessGrid grid{0, 0};
  int replicas = 1;  // ranks sharing each box (tensor parallelism)
};

// Resolves `spec` to the code ranks that run the model, in model-rank order, the same on
// every rank. Collective over `comm` (per_node splits it by node; every kind agrees).
std::vector<int> resolve_model_ranks(Communicator& comm, const ModelRanks& spec);

enum class RedistributionRoute { direct, node_aware, automatic };
std::string_view redistribution_route_name(RedistributionRoute route) noexcept;  // "direct", "node_aware", "auto"

// automatic's default threshold: node_aware when a node holds at least this many code
// ranks sending to one model rank on another node (docs/coupling.md, "Measured").
inline constexpr int kNodeAwareSenders = 8;

struct RedistributionOptions {
  RedistributionRoute route = RedistributionRoute::automatic;
  int node_aware_senders = kNodeAwareSenders;  // automatic's threshold (>= 2)
};

// Facts about this rank's part of the plan (for benchmarks and tests).
struct RedistributionStats {
  int to_model_sends = 0;  // MPI messages this rank sends code -> model (self copies excluded)
  int to_model_recvs = 0;
  int to_code_sends = 0;
  int to_code_recvs = 0;
  std::int64_t self_cells = 0;  // (lat, lon) cells copied locally code -> model
  int nodes = 1;                // nodes the code's ranks span (split_by_node)
  // Code -> model messages this rank sends to a rank on another node (direct pieces and,
  // node_aware, the combined messages it relays), and the (node, model rank) pairs it
  // relays for.
  int internode_sends = 0;
  int relays = 0;
  // Messages of the last transfer (sends and receives) that MPI moved from or into the
  // fields in place, and those packed into a buffer.
  int direct_messages = 0;
  int packed_messages = 0;
};

class Redistribution {
 public:
  // Collective over code.comm(). The decomposition must outlive the plan. The options
  // must agree on every rank (InvalidArgument on all otherwise).
  Redistribution(const Decomposition& code, const ModelRanks& ranks, ModelLayout layout = {},
                 RedistributionOptions options = {});
  ~Redistribution();  // waits for a transfer still in flight
  Redistribution(const Redistribution&) = delete;
  Redistribution& operator=(const Redistribution&) = delete;
  Redistribution(Redistribution&&) noexcept;
  Redistribution& operator=(Redistribution&&) noexcept;

  const Decomposition& code() const;
  // Code ranks of the model, in model-rank order.
  const std::vector<int>& model_ranks() const;
  int model_size() const;
  const ProcessGrid& model_grid() const;  // resolved
  int replicas() const;
  bool is_model_rank() const;
  int model_rank() const;  // -1 on the other ranks
  // The ranks of the model (model rank order) as a communicator; only on model ranks
  // (InvalidArgument elsewhere). Build the model's Mesh over model_comm().mpi_comm().
  Communicator& model_comm() const;
  // The box model rank `m` holds, and this rank's (InvalidArgument on other ranks).
  LocalBox model_box_of(int m) const;
  LocalBox model_box() const;
  // (leading..., model box lat, model box lon) on a model rank.
  Shape model_shape(const Shape& leading) const;
  const RedistributionStats& stats() const;
  RedistributionRoute route() const;  // resolved: direct or node_aware
  std::string str() const;  // "[9, 8] over 2x2 -> 2 model ranks [0, 2] on 2x1 x 1"

  // Code -> model: every code field's box into the model fields (model ranks; others
  // pass {}). code_fields[k]: (leading..., code box); model_fields[k]: the same leading
  // dims and dtype, (model box). Collective over the code communicator.
  void to_model(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields);
  void start_to_model(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields);
  // Model -> code (each cell from replica 0).
  void to_code(const std::vector<Tensor>& model_fields, const std::vector<Tensor>& code_fields);
  void start_to_code(const std::vector<Tensor>& model_fields, const std::vector<Tensor>& code_fields);
  void finish();
  bool in_flight() const;
  // The first transfer of a field set checks the fields collectively (every rank's
  // boxes, and the same count, dtypes and leading dims everywhere); later transfers of
  // fields with the same shapes, dtypes and devices check locally only, so change the
  // field set on every rank alike. After calls that may have changed it on some ranks
  // only (the C API's registrations), forget_fields() makes the next transfer check
  // collectively again.
  void forget_fields();

  struct Plan;  // private: messages, buffers

 private:
  std::unique_ptr<Plan> plan_;
};

}  // namespace tessera::domain
