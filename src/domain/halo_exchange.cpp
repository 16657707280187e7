// HaloExchange: the public face of the halo exchange and its state machine (pack, post,
// wait, unpack) for the forward exchange and its adjoint, the same on every device.
// The pieces come from the planner (halo_planner.cpp); the constructor turns them into
// this rank's messages, self copies and zero fills (halo_plan.hpp); the buffers and the
// pack / unpack / zero passes, which run on the fields' device, are in halo_buffers.cpp.

#include "tessera/domain/halo_exchange.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <map>
#include <utility>

#include "backend/compute.hpp"
#include "comm/request_state.hpp"
#include "domain/halo_plan.hpp"
#include "domain/halo_planner.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"
#include "tessera/ops.hpp"

namespace tessera::domain {

std::string_view pole_policy_name(PolePolicy policy) noexcept {
  switch (policy) {
    case PolePolicy::zero: return "zero";
    case PolePolicy::replicate: return "replicate";
    case PolePolicy::across_pole: return "across_pole";
    case PolePolicy::across_pole_point: return "across_pole_point";
  }
  return "?";
}

std::string_view edge_policy_name(EdgePolicy policy) noexcept {
  switch (policy) {
    case EdgePolicy::from_spec: return "from_spec";
    case EdgePolicy::periodic: return "periodic";
    case EdgePolicy::zero: return "zero";
    case EdgePolicy::none: return "none";
    case EdgePolicy::replicate: return "replicate";
    case EdgePolicy::mirror_even: return "mirror_even";
    case EdgePolicy::mirror_odd: return "mirror_odd";
  }
  return "?";
}

std::string HaloSpec::str() const {
  std::string s = "pole " + std::string(pole_policy_name(pole)) + (periodic_lon ? ", periodic lon" : ", bounded lon");
  const std::pair<const char*, EdgePolicy> edges[] = {{"north", north}, {"south", south}, {"west", west}, {"east", east}};
  for (const auto& [name, policy] : edges) {
    if (policy != EdgePolicy::from_spec) s += std::string(", ") + name + " " + std::string(edge_policy_name(policy));
  }
  return s;
}

namespace {

bool has_edge(const HaloSpec& spec, EdgePolicy policy) {
  for (EdgePolicy e : {spec.north, spec.south, spec.west, spec.east}) {
    if (e == policy) return true;
  }
  return false;
}

}  // namespace

std::string HaloWidths::str() const {
  return "lat " + std::to_string(lat_before) + "+" + std::to_string(lat_after) + ", lon " +
         std::to_string(lon_before) + "+" + std::to_string(lon_after);
}

namespace {

using halo::FieldView;
using halo::HaloRect;
using halo::Transfer;
using tessera::detail::halo_rect_area;

// Tags: forward messages carry kForwardTag + direction, adjoint ones kAdjointTag +
// direction, where direction = 3 * lat_side + lon_side of the halo slot on the rank
// that receives the forward message (side: 0 before, 1 inside, 2 after). Two messages
// between the same pair of ranks (east and west with 2 ranks on a periodic circle)
// therefore never share a tag.
constexpr int kForwardTag = 0x4100;
constexpr int kAdjointTag = 0x4200;
// The empty answer of a message read from node memory goes back under its own tag (on
// the plan's node communicator, where the offsets travel under the tags above).
constexpr int kForwardReadTag = 0x4300;
constexpr int kAdjointReadTag = 0x4400;

}  // namespace

HaloExchange::HaloExchange(const Decomposition& decomposition, HaloSpec spec)
    : plan_(std::make_unique<Plan>(decomposition, spec)) {
  Plan& p = *plan_;
  const Decomposition& d = p.decomposition;
  halo::validate_spec(d, p.spec);
  const int me = d.rank();
  const LocalBox box = d.box();
  const HaloWidths& w = p.spec.width;
  p.padded_lat = box.lat.length + w.lat_before + w.lat_after;
  p.padded_lon = box.lon.length + w.lon_before + w.lon_after;

  // Ordered maps: both ends post and pack in (peer, direction) order.
  std::map<std::pair<int, int>, Transfer> sends, recvs;
  std::vector<HaloRect> covered;  // every halo cell a piece writes (all but an edge left alone)
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
          Transfer& t = recvs[{piece.src_rank, piece.direction}];
          t.peer = piece.src_rank;
          t.direction = piece.direction;
          t.rects.push_back(piece.dst);
          t.cells += halo_rect_area(piece.dst);
        }
      } else if (piece.src_rank == me) {
        Transfer& t = sends[{receiver, piece.direction}];
        t.peer = receiver;
        t.direction = piece.direction;
        t.rects.push_back(piece.src);
        t.cells += halo_rect_area(piece.src);
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

  // The halo frame: full-width strips below and above, side strips beside the interior.
  if (w.lat_before > 0) p.frame.push_back({0, 0, w.lat_before, p.padded_lon, 1});
  if (w.lat_after > 0) p.frame.push_back({w.lat_before + box.lat.length, 0, w.lat_after, p.padded_lon, 1});
  if (w.lon_before > 0) p.frame.push_back({w.lat_before, 0, box.lat.length, w.lon_before, 1});
  if (w.lon_after > 0) {
    p.frame.push_back({w.lat_before, w.lon_before + box.lon.length, box.lat.length, w.lon_after, 1});
  }
  // An edge left to the caller is left by the adjoint too (the forward map is the
  // identity there): the adjoint zeroes only the cells the pieces write.
  if (has_edge(p.spec, EdgePolicy::none)) p.frame = covered;

  p.wait = d.comm().wait_options();
  require_same_on_all_ranks(d.comm().mpi_comm(),
                            shape_str(d.global_shape()) + " " + std::string(stagger_name(d.stagger())) +
                                (d.latitude_rows() == LatitudeRows::pole_points ? " pole-point rows" : "") +
                                " over " + d.grid().str() + " " + w.str() + " " + p.spec.str(),
                            "HaloExchange: the ranks of the domain communicator passed different arguments");
  p.node = tessera::detail::NodeWindow(d.comm().mpi_comm());
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

void HaloExchange::Plan::await_node_answers() {
  if (done_requests.empty()) return;
  tessera::detail::wait_all(done_requests, wait,
                            {"the halo exchange's node-memory read answers", decomposition.comm().mpi_comm()});
  done_requests.clear();
}

void HaloExchange::Plan::settle_node_answers() noexcept {
  if (done_requests.empty()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (std::uncaught_exceptions() == 0) {
    try {
      await_node_answers();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: ~HaloExchange: %s\n", e.what());
    }
  }
  // Unwinding (or the wait failed): a peer may never answer; drop the requests instead.
  for (MPI_Request& r : done_requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);  // an unmatched receive is withdrawn; a sent answer completes anyway
    MPI_Request_free(&r);
  }
  done_requests.clear();
}

namespace {

// Validates the fields of one exchange and describes them for the pack loops, into
// `views` (whose capacity is kept from one exchange to the next).
void describe_fields(const std::vector<Tensor>& fields, std::int64_t padded_lat, std::int64_t padded_lon, int rank,
                     const char* op, std::vector<FieldView>& views) {
  views.clear();
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const Tensor& t = fields[k];
    auto name = [&] { return std::string("HaloExchange::") + op + ": field " + std::to_string(k); };
    if (!t.defined()) throw InvalidArgument(name() + " is undefined");
    // (The host backend accepts every tensor: no name to build for it on every exchange.)
    if (t.device().type != DeviceType::host) backend_for(t.device()).require_usable(t, name());
    if (!(t.device() == fields[0].device())) {
      throw InvalidArgument(name() + " " + t.str() + " is not on the device of field 0 " + fields[0].str() +
                            "; the fields of one exchange live on one device");
    }
    if (t.dim() < 2 || t.dim() > tessera::detail::kMaxDims) {
      throw ShapeError(name() + " " + t.str() + " must have 2 to " + std::to_string(tessera::detail::kMaxDims) +
                       " dims (leading..., lat, lon)");
    }
    if (t.size(t.dim() - 2) != padded_lat || t.size(t.dim() - 1) != padded_lon) {
      throw ShapeError(name() + " " + t.str() + " on domain rank " + std::to_string(rank) +
                       " must end in the padded extents (" + std::to_string(padded_lat) + ", " +
                       std::to_string(padded_lon) + ") (see HaloExchange::padded_shape)");
    }
    FieldView v;
    v.base = t.data();
    v.dtype = t.dtype();
    v.element = t.element_size();
    v.layout.ndim = t.dim();
    for (int d = 0; d < t.dim(); ++d) {
      v.layout.shape[d] = t.shape()[d];
      v.layout.strides[d] = t.strides()[d];
      if (d < t.dim() - 2) v.leading *= t.shape()[d];
    }
    views.push_back(v);
  }
}

using FieldKey = HaloExchange::Plan::FieldKey;

FieldKey key_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {true, t.dtype(), t.device(), t.is_contiguous(), t.shape()};
}

bool same_fields(const std::vector<FieldKey>& keys, const std::vector<Tensor>& fields) {
  if (keys.size() != fields.size()) return false;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const Tensor& t = fields[k];
    const FieldKey& key = keys[k];
    if (key.defined != t.defined()) return false;
    if (!t.defined()) continue;
    if (key.dtype != t.dtype() || !(key.device == t.device()) || key.contiguous != t.is_contiguous() ||
        !std::equal(key.shape.begin(), key.shape.end(), t.shape().begin(), t.shape().end())) {
      return false;
    }
  }
  return true;
}

// What every rank must agree on for messages to match: dtypes and leading dims.
std::string shared_signature_of(const std::vector<Tensor>& fields) {
  std::string s;
  for (const Tensor& t : fields) {
    if (!t.defined() || t.dim() < 2) {
      s += "?;";
      continue;
    }
    s += std::string(dtype_name(t.dtype())) + shape_str(Shape(t.shape().begin(), t.shape().end() - 2)) + ";";
  }
  return s;
}

}  // namespace

// Validation that may fail on one rank only (a field allocated with another rank's
// extents) is agreed collectively the first time a plan sees a field set, and again
// whenever the set changes; repeated exchanges of the same set cost no collective.
static void prepare(HaloExchange::Plan& p, const std::vector<Tensor>& fields, const char* op) {
  if (p.mode != HaloExchange::Plan::Mode::idle) {
    throw InvalidArgument(std::string("HaloExchange::") + op +
                          ": an exchange of this plan is still in flight; call finish() first");
  }
  p.await_node_answers();  // before this rank packs into (or frees) its node memory again
  auto describe = [&] { describe_fields(fields, p.padded_lat, p.padded_lon, p.decomposition.rank(), op, p.views); };
  if (p.validated_fields && same_fields(*p.validated_fields, fields)) {
    describe();
    return;
  }
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  agree_on_success(comm, describe);
  require_same_on_all_ranks(comm, shared_signature_of(fields),
      std::string("HaloExchange::") + op +
          " (field count, dtypes, leading dims): the ranks of the domain communicator passed different arguments");
  // Node memory needs every rank's fields on the host: a device rank's packed bytes are
  // not where its node peers could load them.
  int all_host = std::all_of(fields.begin(), fields.end(), [](const Tensor& t) { return t.device().is_host(); }) ? 1 : 0;
  TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &all_host, 1, MPI_INT, MPI_LAND, comm));
  p.prepare_node_memory(all_host != 0);
  // Agreed only once the node memory is in place: a failure above leaves the next
  // exchange to agree (and size the segments) again instead of using half a plan.
  std::vector<FieldKey> keys;
  for (const Tensor& t : fields) keys.push_back(key_of(t));
  p.validated_fields = std::move(keys);
}

// Posts every receive, then every send: through the transfer's direct datatype when
// `direct` (the forward exchange) and it has one, else through its packed buffer.
static void post(HaloExchange::Plan& p, std::vector<Transfer>& incoming, std::vector<Transfer>& outgoing,
                 int tag_base, bool direct) {
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  p.requests.clear();
  auto check_count = [](std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX)) {
      throw UnsupportedError("HaloExchange: a halo message of " + std::to_string(bytes) +
                             " bytes exceeds MPI's int count limit");
    }
    return static_cast<int>(bytes);
  };
  // Receives first, so a message that arrives early lands in its buffer directly.
  for (Transfer& t : incoming) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (t.via_node) {
      TESSERA_CHECK_MPI(MPI_Irecv(&t.notice, 1, MPI_INT64_T, p.node.node_rank(t.peer), tag_base + t.direction,
                                  p.node.comm(), &r));
    } else if (direct && t.direct != MPI_DATATYPE_NULL) {
      TESSERA_CHECK_MPI(MPI_Irecv(MPI_BOTTOM, 1, t.direct, t.peer, tag_base + t.direction, comm, &r));
    } else {
      p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
      TESSERA_CHECK_MPI(MPI_Irecv(t.buffer.message(), check_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                  tag_base + t.direction, comm, &r));
    }
    p.requests.push_back(r);
  }
  for (Transfer& t : outgoing) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (t.via_node) {
      TESSERA_CHECK_MPI(MPI_Isend(&t.window_offset, 1, MPI_INT64_T, p.node.node_rank(t.peer), tag_base + t.direction,
                                  p.node.comm(), &r));
    } else if (direct && t.direct != MPI_DATATYPE_NULL) {
      TESSERA_CHECK_MPI(MPI_Isend(MPI_BOTTOM, 1, t.direct, t.peer, tag_base + t.direction, comm, &r));
    } else {
      TESSERA_CHECK_MPI(MPI_Isend(t.buffer.message(), check_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                  tag_base + t.direction, comm, &r));
    }
    p.requests.push_back(r);
  }
}

namespace {

// Forward and adjoint exchanges are one procedure run in opposite directions. Forward:
// interior rects (sends) are packed and go out, halo rects (recvs) are filled; on the
// host, messages with long rows skip the packing altogether (Plan::prepare_direct: MPI
// reads and writes the fields through a datatype, which the start()/finish() contract
// allows: between them the interior is read-only and the halo untouched). The adjoint
// (the transpose) runs every message backwards: halo rects are packed and sent to the
// rank they came from, which adds them into the interior rects it sent (an addition MPI
// cannot do on receipt), and the halo is left zero.
// mirror_odd: the halo cells copied across an odd edge hold the negated values. The
// forward exchange negates them after they arrive, the adjoint before they go back.
void negate_mirrored(const HaloExchange::Plan& p, const std::vector<Tensor>& fields) {
  for (const Tensor& field : fields) {
    if (!field.defined()) continue;
    const int d = field.dim();
    for (const HaloRect& r : p.negated) {
      Tensor cells = field.narrow(d - 2, r.lat0, r.rows).narrow(d - 1, r.lon0, r.cols);
      Tensor negated = cells.contiguous().clone();
      tessera::ops::scale(negated, -1.0);
      cells.copy_from(negated);
    }
  }
}

void start_exchange(HaloExchange::Plan& p, const std::vector<Tensor>& fields, bool adjoint) {
  prepare(p, fields, adjoint ? "start_adjoint" : "start");
  // On every rank alike (prepare has agreed the fields' dtypes), before any message.
  if (has_edge(p.spec, EdgePolicy::mirror_odd)) {
    for (const Tensor& field : fields) {
      if (field.defined() && field.dtype() == DType::i64) {
        throw InvalidArgument("HaloExchange (" + p.spec.str() + "): mirror_odd negates values; an i64 field cannot "
                              "take it (exchange it with a plan whose edges copy)");
      }
    }
  }
  if (adjoint) negate_mirrored(p, fields);
  // The fields stay alive until finish. They are assigned into the Tensor objects the last
  // exchange left (undefined, but with their shape vectors' room), so a repeated exchange
  // allocates nothing here.
  p.fields.resize(fields.size());
  std::copy(fields.begin(), fields.end(), p.fields.begin());
  p.device = fields.empty() ? Device::host() : fields.front().device();
  std::vector<Transfer>& outgoing = adjoint ? p.recvs : p.sends;
  std::vector<Transfer>& incoming = adjoint ? p.sends : p.recvs;
  const bool direct = !adjoint;
  if (direct) p.prepare_direct();
  bool node_packed = false;
  for (Transfer& t : outgoing) {
    if (t.via_node) {
      p.pack(t.rects, p.node.mine() + t.window_offset);
      node_packed = true;
      continue;
    }
    if (direct && t.direct != MPI_DATATYPE_NULL) continue;
    p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
    p.pack(t.rects, t.buffer.packed());
    t.buffer.packed_to_message();
  }
  if (node_packed) p.node.sync();  // the packed bytes before the offsets that announce them
  // MPI knows nothing of the device's stream. When it addresses device memory directly,
  // the pack kernels must be done before it reads the send buffers, and the previous
  // exchange's unpack kernels before it writes the receive buffers. (Staged copies
  // already wait for the stream; on the host there is nothing to wait for.)
  tessera::detail::compute_for(p.device).synchronize_stream(p.device.index);
  post(p, incoming, outgoing, adjoint ? kAdjointTag : kForwardTag, direct);
  p.mode = adjoint ? HaloExchange::Plan::Mode::adjoint : HaloExchange::Plan::Mode::forward;
  // Local work overlaps the messages in flight: pieces whose source is this rank go
  // through the self buffer (forward: interior -> halo; adjoint: halo added back into
  // the interior). Forward then zeroes the rows beyond a pole; the adjoint has packed or
  // added every halo value, so the transpose leaves zeros behind.
  std::int64_t self_cells = 0;
  for (const HaloRect& rect : p.self_from) self_cells += halo_rect_area(rect);
  if (self_cells > 0) {
    p.reserve(p.self_buffer, self_cells, /*for_mpi=*/false);
    p.pack(adjoint ? p.self_to : p.self_from, p.self_buffer.packed());
    p.unpack(adjoint ? p.self_from : p.self_to, p.self_buffer.packed(), adjoint);
  }
  p.zero(adjoint ? p.frame : p.zeros);
}

void finish_exchange(HaloExchange::Plan& p, bool adjoint) {
  const auto expected = adjoint ? HaloExchange::Plan::Mode::adjoint : HaloExchange::Plan::Mode::forward;
  if (p.mode != expected) {
    throw InvalidArgument(adjoint ? "HaloExchange::finish_adjoint: no adjoint exchange is in flight (call "
                                    "start_adjoint() first)"
                                  : "HaloExchange::finish: no forward exchange is in flight (call start() first)");
  }
  // Whatever happens, the plan is idle afterwards: a failed wait leaves nothing to finish.
  p.mode = HaloExchange::Plan::Mode::idle;
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  tessera::detail::wait_all(p.requests, p.wait,
                            {adjoint ? "the halo exchange's adjoint messages" : "the halo exchange's messages", comm});
  std::vector<Transfer>& incoming = adjoint ? p.sends : p.recvs;
  std::vector<Transfer>& outgoing = adjoint ? p.recvs : p.sends;
  const int done_tag = adjoint ? kAdjointReadTag : kForwardReadTag;
  bool node_read = false;
  for (const Transfer& t : incoming) {
    if (t.via_node) {
      if (!node_read) p.node.sync();  // the sender's packed bytes, announced by its offset
      node_read = true;
      p.unpack(t.rects, p.node.of(t.peer) + t.notice, adjoint);
      continue;
    }
    if (!adjoint && t.direct != MPI_DATATYPE_NULL) continue;  // MPI wrote the halo itself
    t.buffer.message_to_packed();
    p.unpack(t.rects, t.buffer.packed(), adjoint);
  }
  // Node memory: tell each sender its bytes are read, and ask each receiver for the same
  // answer, awaited before this plan packs again (await_node_answers), not here: ranks
  // may finish the exchanges of two plans in different orders, and a wait here for a
  // peer that finishes the other plan first would wait for ever. The answers go over the
  // plan's own node communicator (as the offsets do), so no plan takes another's.
  for (const Transfer& t : incoming) {
    if (!t.via_node) continue;
    p.done_requests.push_back(MPI_REQUEST_NULL);
    TESSERA_CHECK_MPI(MPI_Isend(nullptr, 0, MPI_BYTE, p.node.node_rank(t.peer), done_tag + t.direction,
                                p.node.comm(), &p.done_requests.back()));
  }
  for (const Transfer& t : outgoing) {
    if (!t.via_node) continue;
    p.done_requests.push_back(MPI_REQUEST_NULL);
    TESSERA_CHECK_MPI(MPI_Irecv(nullptr, 0, MPI_BYTE, p.node.node_rank(t.peer), done_tag + t.direction,
                                p.node.comm(), &p.done_requests.back()));
  }

  if (!adjoint) negate_mirrored(p, p.fields);
  static const Tensor undefined;
  for (Tensor& t : p.fields) t = undefined;  // lets the fields go, keeps the objects for the next exchange
}

}  // namespace

void HaloExchange::start(const std::vector<Tensor>& fields) { start_exchange(*plan_, fields, false); }
void HaloExchange::finish() { finish_exchange(*plan_, false); }
void HaloExchange::start_adjoint(const std::vector<Tensor>& fields) { start_exchange(*plan_, fields, true); }
void HaloExchange::finish_adjoint() { finish_exchange(*plan_, true); }

void HaloExchange::exchange(const std::vector<Tensor>& fields) {
  start(fields);
  finish();
}

void HaloExchange::exchange_adjoint(const std::vector<Tensor>& fields) {
  start_adjoint(fields);
  finish_adjoint();
}

namespace {

void require_vector_components(const Tensor& u, const Tensor& v) {
  for (const Tensor* t : {&u, &v}) {
    if (t->defined() && t->dtype() == DType::i64) {
      throw InvalidArgument(std::string("HaloExchange::exchange_vector: component ") + (t == &u ? "u" : "v") +
                            " is i64; a vector field is f32, f64 or bf16");
    }
  }
}

}  // namespace

void HaloExchange::flip_beyond_poles(const Tensor& field) const {
  // Only an edge that takes the spec's pole policy mirrors across a pole.
  const bool north = spec().north == EdgePolicy::from_spec && mirrors_across_pole(spec().pole);
  const bool south = spec().south == EdgePolicy::from_spec && mirrors_across_pole(spec().pole);
  if (!north && !south) return;
  const Decomposition& d = decomposition();
  const HaloWidths& w = spec().width;
  const LocalBox box = d.box();
  // A field with the wrong shape is left alone: the exchange reports it, agreed.
  if (!field.defined() || field.dim() < 2 || field.dtype() == DType::i64 ||
      field.shape() != padded_shape(Shape(field.shape().begin(), field.shape().end() - 2))) {
    return;
  }
  const int lat_dim = field.dim() - 2;
  const auto negate_rows = [&](std::int64_t first, std::int64_t count) {
    if (count <= 0) return;
    Tensor rows = field.narrow(lat_dim, first, count);
    Tensor negated = rows.contiguous().clone();
    tessera::ops::scale(negated, -1.0);
    rows.copy_from(negated);
  };
  if (north && box.lat.start == 0) negate_rows(0, w.lat_before);
  if (south && box.lat.end() == d.global_lat()) negate_rows(w.lat_before + box.lat.length, w.lat_after);
}

void HaloExchange::exchange_vector(const Tensor& u, const Tensor& v) {
  // Agreed, so that an i64 component on one rank fails every rank.
  agree_on_success(decomposition().comm().mpi_comm(), [&] { require_vector_components(u, v); });
  exchange(std::vector<Tensor>{u, v});
  flip_beyond_poles(u);
  flip_beyond_poles(v);
}

void HaloExchange::exchange_vector_adjoint(const Tensor& u, const Tensor& v) {
  agree_on_success(decomposition().comm().mpi_comm(), [&] { require_vector_components(u, v); });
  flip_beyond_poles(u);
  flip_beyond_poles(v);
  exchange_adjoint(std::vector<Tensor>{u, v});
}

namespace {

void require_same_grid(const HaloExchange& u_plan, const HaloExchange& v_plan) {
  const Decomposition& du = u_plan.decomposition();
  const Decomposition& dv = v_plan.decomposition();
  if (&u_plan == &v_plan || &du.comm() != &dv.comm() || du.grid() != dv.grid() ||
      du.global_lon() != dv.global_lon() || du.leading_shape() != dv.leading_shape() ||
      u_plan.spec().str() != v_plan.spec().str()) {
    throw InvalidArgument("exchange_vector: u's plan (" + du.str() + ") and v's plan (" + dv.str() +
                          ") must be two plans of one grid, communicator and pole policy");
  }
}

}  // namespace

// The two plans' messages travel together (both started before either is waited for);
// both ranks start them in the order u, v, so MPI's non-overtaking rule keeps them apart.
void exchange_vector(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v) {
  agree_on_success(u_plan.decomposition().comm().mpi_comm(), [&] {
    require_same_grid(u_plan, v_plan);
    require_vector_components(u, v);
  });
  u_plan.start({u});
  v_plan.start({v});
  u_plan.finish();
  v_plan.finish();
  u_plan.flip_beyond_poles(u);
  v_plan.flip_beyond_poles(v);
}

void exchange_vector_adjoint(HaloExchange& u_plan, const Tensor& u, HaloExchange& v_plan, const Tensor& v) {
  agree_on_success(u_plan.decomposition().comm().mpi_comm(), [&] {
    require_same_grid(u_plan, v_plan);
    require_vector_components(u, v);
  });
  u_plan.flip_beyond_poles(u);
  v_plan.flip_beyond_poles(v);
  u_plan.start_adjoint({u});
  v_plan.start_adjoint({v});
  u_plan.finish_adjoint();
  v_plan.finish_adjoint();
}

}  // namespace tessera::domain
