// HaloExchange as an object: its plan, built once from the planner's pieces
// (halo_planner.cpp) into this rank's messages, self copies, zero fills and halo frame,
// and agreed over the ranks; its lifetime (a plan destroyed or replaced with an
// exchange in flight completes it first); the padded shape of its fields. The exchange
// itself is in halo_exchange.cpp.

#include <cstdio>
#include <exception>
#include <map>
#include <utility>

#include "domain/halo_plan.hpp"
#include "domain/halo_planner.hpp"
#include "tessera/agree.hpp"
#include "tessera/comm.hpp"

namespace tessera::domain {

namespace {

using halo::HaloRect;
using halo::Transfer;
using tessera::detail::halo_rect_area;

// Sorts every piece of every rank's halo into this rank's sends, receives, self copies
// and zero fills; returns the halo cells some piece writes (all but an edge left alone).
std::vector<HaloRect> add_pieces(HaloExchange::Plan& p) {
  const Decomposition& d = p.decomposition;
  const int me = d.rank();
  // Ordered maps: both ends post and pack in (peer, direction) order.
  std::map<std::pair<int, int>, Transfer> sends, recvs;
  std::vector<HaloRect> covered;
  const auto add = [](Transfer& t, int peer, int direction, const HaloRect& rect) {
    t.peer = peer;
    t.direction = direction;
    t.rects.push_back(rect);
    t.cells += halo_rect_area(rect);
  };
  for (int receiver = 0; receiver < d.size(); ++receiver) {
    for (const halo::Piece& piece : halo::pieces_of(d, p.spec, receiver)) {
      if (receiver == me) {
        covered.push_back(piece.dst);
        if (piece.negate) p.negated.push_back(piece.dst);
        if (piece.src_rank < 0) {
          p.zeros.push_back(piece.dst);
        } else if (piece.src_rank == me) {
          p.self_from.push_back(piece.src);
          p.self_to.push_back(piece.dst);
          p.stats.self_cells += halo_rect_area(piece.dst);
        } else {
          add(recvs[{piece.src_rank, piece.direction}], piece.src_rank, piece.direction, piece.dst);
        }
      } else if (piece.src_rank == me) {
        add(sends[{receiver, piece.direction}], receiver, piece.direction, piece.src);
      }
    }
  }
  for (auto& [key, t] : sends) {
    p.stats.send_cells += t.cells;
    p.sends.push_back(std::move(t));
  }
  for (auto& [key, t] : recvs) {
    p.stats.recv_cells += t.cells;
    p.recvs.push_back(std::move(t));
  }
  p.stats.send_messages = static_cast<int>(p.sends.size());
  p.stats.recv_messages = static_cast<int>(p.recvs.size());
  return covered;
}

// The halo frame the adjoint zeroes: full-width strips below and above, side strips
// beside the interior. An edge left to the caller is left by the adjoint too (the
// forward map is the identity there): then only the cells the pieces write.
std::vector<HaloRect> frame_of(const HaloExchange::Plan& p, std::vector<HaloRect> covered) {
  if (halo::has_edge(p.spec, EdgePolicy::none)) return covered;
  const LocalBox box = p.decomposition.box();
  const HaloWidths& w = p.spec.width;
  std::vector<HaloRect> frame;
  if (w.lat_before > 0) frame.push_back({0, 0, w.lat_before, p.padded_lon, 1});
  if (w.lat_after > 0) frame.push_back({w.lat_before + box.lat.length, 0, w.lat_after, p.padded_lon, 1});
  if (w.lon_before > 0) frame.push_back({w.lat_before, 0, box.lat.length, w.lon_before, 1});
  if (w.lon_after > 0) frame.push_back({w.lat_before, w.lon_before + box.lon.length, box.lat.length, w.lon_after, 1});
  return frame;
}

}  // namespace

HaloExchange::HaloExchange(const Decomposition& decomposition, HaloSpec spec)
    : plan_(std::make_unique<Plan>(decomposition, spec)) {
  Plan& p = *plan_;
  const Decomposition& d = p.decomposition;
  halo::validate_spec(d, p.spec);
  const LocalBox box = d.box();
  const HaloWidths& w = p.spec.width;
  p.padded_lat = box.lat.length + w.lat_before + w.lat_after;
  p.padded_lon = box.lon.length + w.lon_before + w.lon_after;
  p.frame = frame_of(p, add_pieces(p));
  p.wait = d.comm().wait_options();
  require_same_on_all_ranks(d.comm().mpi_comm(),
                            shape_str(d.global_shape()) + " " + std::string(stagger_name(d.stagger())) +
                                (d.latitude_rows() == LatitudeRows::pole_points ? " pole-point rows" : "") +
                                " over " + d.grid().str() + " " + w.str() + " " + p.spec.str(),
                            "HaloExchange: the ranks of the domain communicator passed different arguments");
  p.node = tessera::detail::NodeWindow(d.comm().mpi_comm());
}

HaloExchange::Plan::~Plan() {
  settle_node_answers();
  free_direct();
}

HaloExchange::~HaloExchange() {
  if (plan_ && plan_->mode != Plan::Mode::idle) {
    // A destructor cannot throw; completing keeps MPI from touching freed buffers.
    try {
      if (plan_->mode == Plan::Mode::forward) {
        finish();
      } else {
        finish_adjoint();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: halo exchange in flight failed in ~HaloExchange: %s\n", e.what());
    }
  }
}

HaloExchange::HaloExchange(HaloExchange&&) noexcept = default;
HaloExchange& HaloExchange::operator=(HaloExchange&& other) noexcept {
  if (this != &other) {
    HaloExchange dying(std::move(*this));  // completes anything in flight
    plan_ = std::move(other.plan_);
  }
  return *this;
}

const Decomposition& HaloExchange::decomposition() const { return plan_->decomposition; }
const HaloSpec& HaloExchange::spec() const { return plan_->spec; }
const HaloPlanStats& HaloExchange::stats() const { return plan_->stats; }
bool HaloExchange::in_flight() const { return plan_->mode != Plan::Mode::idle; }

Shape HaloExchange::padded_shape(const Shape& leading) const {
  Shape s = leading;
  s.push_back(plan_->padded_lat);
  s.push_back(plan_->padded_lon);
  return s;
}

Shape HaloExchange::padded_shape() const { return padded_shape(plan_->decomposition.leading_shape()); }

Tensor HaloExchange::allocate(DType dtype, const Shape& leading, Device device) const {
  return Tensor::zeros(padded_shape(leading), dtype, device);
}

Tensor HaloExchange::interior(const Tensor& padded) const {
  const LocalBox box = plan_->decomposition.box();
  const HaloWidths& w = plan_->spec.width;
  if (!padded.defined() || padded.dim() < 2 || padded.size(padded.dim() - 2) != plan_->padded_lat ||
      padded.size(padded.dim() - 1) != plan_->padded_lon) {
    throw ShapeError("HaloExchange::interior: " + (padded.defined() ? padded.str() : std::string("undefined")) +
                     " is not a padded field of domain rank " + std::to_string(plan_->decomposition.rank()) +
                     " (its (lat, lon) must be (" + std::to_string(plan_->padded_lat) + ", " +
                     std::to_string(plan_->padded_lon) + "))");
  }
  const int d = padded.dim();
  return padded.narrow(d - 2, w.lat_before, box.lat.length).narrow(d - 1, w.lon_before, box.lon.length);
}

}  // namespace tessera::domain
