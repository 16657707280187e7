#pragma once
// HaloExchange: the halo traffic of a Decomposition, planned once and run many times.
//
// A field is this rank's box surrounded by a halo frame: a tensor of shape
//   (leading..., lat_before + local_lat + lat_after, lon_before + local_lon + lon_after)
// (padded_shape()), any strides (a Fortran-order view is fine), dtype f32, f64, bf16 or
// i64. The interior (interior()) is owned data; exchange() fills every halo cell:
//
//   - from the rank owning that global cell (edges and, on 2-D grids, corners, which
//     come straight from the diagonal rank: one round, no two-phase sweep);
//   - longitude: periodic (wraps, also with 1 or 2 ranks along longitude) or zero fill;
//   - per edge (HaloSpec::north, south, west, east; north is latitude row 0's side, west
//     longitude column 0's), overriding the two rules around it: periodic (both edges of
//     the axis: a doubly periodic or channel domain), zero, none (the halo beyond that
//     edge, corners included, is left exactly as the caller wrote it: walls, open
//     boundaries, a limited-area grid whose boundary rows the model owns), replicate
//     (latitude edges), mirror_even and mirror_odd (the rows or columns mirrored about
//     the edge, negated for odd: a wall for a scalar or the normal component of a
//     vector). A regional grid: both axes non-periodic (west and east zero or none);
//   - latitude beyond a pole, by PolePolicy:
//       zero         zero fill (the conv's zero padding);
//       replicate    the edge row, repeated (numpy 'edge' padding);
//       across_pole  the row at the mirrored latitude, shifted by half the longitudes:
//                    halo row k beyond the pole is grid row k (counting from the pole)
//                    at longitude + nlon/2, possibly owned by another rank.
//                    Needs periodic longitude and an even longitude count.
//       across_pole_point  the same for a grid whose first and last latitude rows are
//                    the poles themselves (721 latitudes, pole points included): the
//                    mirror is the pole row, so halo row k beyond the pole is grid row k
//                    counting the pole as row 0 (row -k <- row k), at longitude + nlon/2.
//
// Several fields, of different dtypes and leading dims, travel in one exchange with one
// message per (neighbour, direction): every field's part for that neighbour is packed
// into one buffer. With host fields, a neighbour on the same node (split_by_node) reads a
// message of 8 KiB or more straight from the sender's packed bytes in MPI shared memory
// (the message carries only where they are, and an empty answer says they were read);
// smaller messages, other nodes and device fields go through MPI as described. The MPI tag is the direction of the halo slot on the receiving side
// (below/inside/above in lat x before/inside/after in lon), so with 1 or 2 ranks along a
// periodic dim the east and west messages between the same two ranks stay apart; a
// rank's own pieces (periodic wrap onto itself) are copied locally without MPI.
//
// The adjoint (exchange_adjoint) is the transpose of the forward map: each halo value
// is sent back and added into the owner's cell it was copied from, then every halo cell
// is zeroed. ⟨A x, y⟩ = ⟨x, Aᵀ y⟩ holds over the padded fields of all ranks.
//
// start()/finish() split an exchange for overlap: start() packs and posts, finish()
// waits (under the communicator's wait policy: MPI_Testall + short sleep on an
// oversubscribed node) and unpacks. Between them the caller may read the interior but
// must not write it nor touch the halo, and must keep the fields alive. One exchange
// may be in flight per plan. Ranks must start exchanges of plans sharing a
// communicator in the same order (MPI's non-overtaking rule then keeps them apart).
//
// Buffers are sized from the plan and the fields and reused between exchanges.
//
// Staggered fields (C-grid): a plan of Decomposition::staggered(...) exchanges the
// fields on those faces, by the rules above applied to face indices: lon_face fields
// (u on the east faces) have the cells' plan (the half-turn maps east face j to east
// face j + nlon/2); lat_face fields (v on the faces between rows) are mirrored about
// the pole face (faces of cell rows, with across_pole) or about the pole between faces
// -1 and 0 (faces of pole-point rows, with across_pole_point). A C-grid vector pair
// (u on lon faces, v on lat faces) is the free exchange_vector(u_plan, u, v_plan, v).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/tensor.hpp"

namespace tessera::domain {

enum class PolePolicy { zero, replicate, across_pole, across_pole_point };
// "zero" "replicate" "across_pole" "across_pole_point"
std::string_view pole_policy_name(PolePolicy policy) noexcept;
// Whether halo rows beyond a pole are mirrored rows (across_pole, across_pole_point).
constexpr bool mirrors_across_pole(PolePolicy policy) noexcept {
  return policy == PolePolicy::across_pole || policy == PolePolicy::across_pole_point;
}

// Halo width per side. "before" is the low-index side (lat row 0 side, lon column 0 side).
struct HaloWidths {
  int lat_before = 0, lat_after = 0;
  int lon_before = 0, lon_after = 0;
  static HaloWidths uniform(int width) { return {width, width, width, width}; }
  bool operator==(const HaloWidths&) const = default;
  std::string str() const;  // "lat 1+1, lon 2+2"
};

// What fills the halo beyond one edge of the grid (see the top).
enum class EdgePolicy {
  from_spec,    // the spec's `pole` (north, south) or `periodic_lon` (west, east)
  periodic,     // wraps to the opposite edge; both edges of the axis must say so
  zero,
  none,         // left exactly as the caller wrote it (also by the adjoint)
  replicate,    // the edge row (column) repeated
  mirror_even,  // halo k beyond the edge <- the k-th owned row (column) from it
  mirror_odd,   // the same, negated
};
// "from_spec" "periodic" "zero" "none" "replicate" "mirror_even" "mirror_odd"
std::string_view edge_policy_name(EdgePolicy policy) noexcept;

struct HaloSpec {
  HaloWidths width;
  bool periodic_lon = true;
  PolePolicy pole = PolePolicy::zero;
  // Per-edge overrides (from_spec: the two rules above decide).
  EdgePolicy north = EdgePolicy::from_spec, south = EdgePolicy::from_spec;
  EdgePolicy west = EdgePolicy::from_spec, east = EdgePolicy::from_spec;
  // "pole zero, periodic lon" with any override: "north none, south mirror_odd, ..."
  std::string str() const;
};

// Facts about this rank's part of the plan (for benchmarks and tests).
struct HaloPlanStats {
  int send_messages = 0;   // MPI messages this rank sends per exchange (self copies excluded)
  int recv_messages = 0;
  std::int64_t send_cells = 0;  // (lat, lon) cells per leading index sent per exchange
  std::int64_t recv_cells = 0;
  std::int64_t self_cells = 0;  // cells copied locally (periodic wrap onto this rank)
  // How the last exchange's field set travels: of send_messages, those read by a peer on
  // this node straight from this rank's node memory, and those MPI reads from the
  // fields through a datatype (forward, host, rows >= 256 bytes, at most 64 KiB).
  int node_memory_messages = 0;
  int direct_messages = 0;
};

class HaloExchange {
 public:
  // Collective over the decomposition's communicator (checks every rank planned the same
  // spec). Throws InvalidArgument when a rank's extent is smaller than the halo it must
  // send, naming the rank, its extent and the receiver; or for a spec across_pole cannot
  // serve (odd longitude count, non-periodic longitude, latitude faces of the other kind
  // of rows); or for edge policies that contradict each other (one periodic edge of an
  // axis) or the decomposition's known periodicity (a Cartesian communicator's periods).
  // The fields follow the decomposition's stagger (its faces' boxes).
  HaloExchange(const Decomposition& decomposition, HaloSpec spec);
  // Waits for an exchange still in flight and for the node-memory "read" answers.
  // Collective over the node's ranks of the domain communicator (it frees the node
  // memory; destroy plans in the same order on every rank) unless an exception unwinds.
  ~HaloExchange();
  HaloExchange(const HaloExchange&) = delete;
  HaloExchange& operator=(const HaloExchange&) = delete;
  HaloExchange(HaloExchange&&) noexcept;
  HaloExchange& operator=(HaloExchange&&) noexcept;

  const Decomposition& decomposition() const;
  const HaloSpec& spec() const;
  const HaloPlanStats& stats() const;

  // (leading..., padded lat, padded lon) of this rank's fields.
  Shape padded_shape(const Shape& leading) const;
  Shape padded_shape() const;  // leading dims of the decomposition's global shape
  // A zero-filled field of padded_shape(leading) on `device`.
  Tensor allocate(DType dtype, const Shape& leading, Device device = Device::host()) const;
  // The owned part of a padded field (a view sharing its storage).
  Tensor interior(const Tensor& padded) const;

  // Forward: fill the halos of every field.
  void exchange(const std::vector<Tensor>& fields);
  void exchange(const Tensor& field) { exchange(std::vector<Tensor>{field}); }
  void start(const std::vector<Tensor>& fields);
  void finish();

  // Adjoint: add every halo value into the cell it was copied from, zero the halos.
  void exchange_adjoint(const std::vector<Tensor>& fields);
  void exchange_adjoint(const Tensor& field) { exchange_adjoint(std::vector<Tensor>{field}); }
  void start_adjoint(const std::vector<Tensor>& fields);
  void finish_adjoint();

  // A vector field's two horizontal components (u eastward, v northward; f32, f64 or
  // bf16): exchanged together like two fields, then, under across_pole and
  // across_pole_point, the halo rows beyond a pole negated in both, because a vector
  // mirrored across the pole points the other way (with the half-turn in longitude, the
  // local east and north both reverse). Other policies: exactly exchange({u, v}).
  void exchange_vector(const Tensor& u, const Tensor& v);
  // Its transpose: the beyond-pole halo rows negated first, then exchange_adjoint.
  void exchange_vector_adjoint(const Tensor& u, const Tensor& v);
  // The sign flip alone (after finish() of a split exchange, before start_adjoint()):
  // this rank's halo rows beyond a pole times -1 under the mirroring policies, nothing
  // otherwise. Not collective.
  void flip_beyond_poles(const Tensor& field) const;

  bool in_flight() const;

  struct Plan;  // private: messages, pieces, buffers

 private:
  std::unique_ptr<Plan> plan_;
};

// A C-grid vector pair: u on the east faces (u_plan of a lon_face, or cell-centred,
// decomposition), v on the latitude faces (v_plan of a lat_face one), of one grid,
// communicator and pole policy. Both exchanged at once, then, under the mirroring
// policies, negated beyond the poles (as HaloExchange::exchange_vector). Collective.
void exchange_vector(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v);
// Its transpose: negated beyond the poles, then both adjoint exchanges.
void exchange_vector_adjoint(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v);

}  // namespace tessera::domain
