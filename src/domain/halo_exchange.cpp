// HaloExchange: planning (which cells of which rank fill which halo cells of which
// rank) and the pack / post / wait / unpack of an exchange and of its adjoint, on the
// fields' device (backend/compute.hpp: halo_pack, halo_unpack, halo_zero).
//
// Planning is pure arithmetic on the Decomposition. Each halo cell (i, j) of a rank,
// in global indices, maps through the latitude rule (inside the grid: itself; beyond a
// pole: zero, the edge row, or the mirrored row with a longitude shift of nlon/2) and
// the longitude rule (periodic wrap or zero) to an owned source cell or to zero. The two
// rules are separable, so each axis is cut into runs over which the source index moves
// by +1 or -1 and stays on one rank; a run of rows times a run of columns is a piece: a
// rectangle copied from one rank's interior into another's halo. Every rank plans the
// pieces of every rank in the same order, which is how both ends of a message agree on
// its layout without exchanging any metadata.

#include "tessera/domain/halo_exchange.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "comm/request_state.hpp"
#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "backend/compute.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/halo_index.hpp"

namespace tessera::domain {

std::string_view pole_policy_name(PolePolicy policy) noexcept {
  switch (policy) {
    case PolePolicy::zero: return "zero";
    case PolePolicy::replicate: return "replicate";
    case PolePolicy::across_pole: return "across_pole";
  }
  return "?";
}

std::string HaloWidths::str() const {
  return "lat " + std::to_string(lat_before) + "+" + std::to_string(lat_after) + ", lon " +
         std::to_string(lon_before) + "+" + std::to_string(lon_after);
}

namespace {

using detail::HaloRect;

// Tags: forward messages carry kForwardTag + direction, adjoint ones kAdjointTag +
// direction, where direction = 3 * lat_side + lon_side of the halo slot on the rank
// that receives the forward message (side: 0 before, 1 inside, 2 after). Two messages
// between the same pair of ranks (east and west with 2 ranks on a periodic circle)
// therefore never share a tag.
constexpr int kForwardTag = 0x4100;
constexpr int kAdjointTag = 0x4200;

enum class Kind { copy, zero };

// A run of consecutive halo indices along one axis of the receiving rank.
struct Run {
  Kind kind = Kind::copy;
  std::int64_t dst = 0;     // first global index on the receiving side
  std::int64_t length = 0;
  std::int64_t src = 0;     // global source index of the first element
  int step = 1;             // source index step per element: +1, or -1 across a pole
  int block = 0;            // process-grid row/column owning the source
  int side = 1;             // 0 before, 1 inside, 2 after (of the receiving box)
  std::int64_t shift = 0;   // lat runs: longitude shift of the source (across the pole)
  bool beyond_pole = false; // lat runs: rows outside [0, nlat)
};

struct Piece {
  int src_rank = -1;  // -1: zero fill
  int direction = 0;
  HaloRect src;  // in the source rank's padded field
  HaloRect dst;  // in the receiving rank's padded field
};

int block_of(std::int64_t index, std::int64_t global, int parts) {
  // Inverse of shard_range: the first global % parts blocks hold base + 1.
  const std::int64_t base = global / parts, extra = global % parts;
  const std::int64_t big = extra * (base + 1);
  if (index < big) return static_cast<int>(index / (base + 1));
  return static_cast<int>(extra + (index - big) / base);
}

std::int64_t wrap(std::int64_t j, std::int64_t n) { return ((j % n) + n) % n; }

void append(std::vector<Run>& runs, const Run& element) {
  if (!runs.empty()) {
    Run& last = runs.back();
    const bool same = last.kind == element.kind && last.side == element.side && last.shift == element.shift &&
                      last.beyond_pole == element.beyond_pole && last.dst + last.length == element.dst;
    if (same && element.kind == Kind::zero) {
      ++last.length;
      return;
    }
    if (same && last.block == element.block) {
      const std::int64_t delta = element.src - (last.src + (last.length - 1) * last.step);
      if (last.length == 1 && (delta == 1 || delta == -1)) {
        last.step = static_cast<int>(delta);
        ++last.length;
        return;
      }
      if (last.length > 1 && delta == last.step) {
        ++last.length;
        return;
      }
    }
  }
  runs.push_back(element);
}

class Planner {
 public:
  Planner(const Decomposition& d, const HaloSpec& spec) : d_(d), s_(spec) {}

  void validate_spec() const {
    const HaloWidths& w = s_.width;
    const std::string what = "HaloExchange (" + w.str() + ", pole " + std::string(pole_policy_name(s_.pole)) + ")";
    if (w.lat_before < 0 || w.lat_after < 0 || w.lon_before < 0 || w.lon_after < 0) {
      throw InvalidArgument(what + ": halo widths must be >= 0");
    }
    if (s_.pole == PolePolicy::across_pole) {
      if (!s_.periodic_lon) {
        throw InvalidArgument(what + ": across_pole needs periodic longitude (the sphere wraps)");
      }
      if (d_.global_lon() % 2 != 0) {
        throw InvalidArgument(what + ": across_pole needs an even longitude count, got " +
                              std::to_string(d_.global_lon()) + " (the halo is shifted by nlon/2)");
      }
    }
  }

  std::vector<Run> lat_runs(int q) const {
    const ShardRange own = d_.lat_range(q);
    const std::int64_t n = d_.global_lat();
    std::vector<Run> runs;
    for (std::int64_t i = own.start - s_.width.lat_before; i < own.end() + s_.width.lat_after; ++i) {
      Run e;
      e.dst = i;
      e.length = 1;
      e.side = i < own.start ? 0 : (i >= own.end() ? 2 : 1);
      if (i >= 0 && i < n) {
        e.src = i;
      } else {
        e.beyond_pole = true;
        const bool low = i < 0;
        switch (s_.pole) {
          case PolePolicy::zero: e.kind = Kind::zero; break;
          case PolePolicy::replicate: e.src = low ? 0 : n - 1; break;
          case PolePolicy::across_pole:
            e.src = low ? -1 - i : 2 * n - 1 - i;
            e.shift = d_.global_lon() / 2;
            break;
        }
        if (e.kind == Kind::copy && (e.src < 0 || e.src >= n)) {
          throw InvalidArgument("HaloExchange: a latitude halo of " + std::to_string(low ? s_.width.lat_before : s_.width.lat_after) +
                                " rows reaches past both poles of a " + std::to_string(n) + "-latitude grid");
        }
      }
      if (e.kind == Kind::copy) e.block = block_of(e.src, n, d_.grid().lat);
      append(runs, e);
    }
    return runs;
  }

  std::vector<Run> lon_runs(int r, std::int64_t shift) const {
    const ShardRange own = d_.lon_range(r);
    const std::int64_t n = d_.global_lon();
    std::vector<Run> runs;
    for (std::int64_t j = own.start - s_.width.lon_before; j < own.end() + s_.width.lon_after; ++j) {
      Run e;
      e.dst = j;
      e.length = 1;
      e.side = j < own.start ? 0 : (j >= own.end() ? 2 : 1);
      const std::int64_t jj = j + shift;
      if (s_.periodic_lon) {
        e.src = wrap(jj, n);
      } else if (jj >= 0 && jj < n) {
        e.src = jj;
      } else {
        e.kind = Kind::zero;
      }
      if (e.kind == Kind::copy) e.block = block_of(e.src, n, d_.grid().lon);
      append(runs, e);
    }
    return runs;
  }

  // The rule of the issue: a rank must be able to send a neighbour its whole halo
  // from its own cells. Checked for every receiver in rank order, so every rank throws
  // the same first error.
  void check_lat(int receiver, int q, const std::vector<Run>& runs) const {
    const ShardRange own = d_.lat_range(q);
    const int P = d_.grid().lat;
    for (int side : {0, 2}) {
      for (bool beyond : {false, true}) {
        std::int64_t rows = 0;
        bool one_block = true;
        int nearest = -1;
        if (!beyond) {
          const std::int64_t edge = side == 0 ? own.start - 1 : own.end();
          if (edge < 0 || edge >= d_.global_lat()) continue;
          nearest = block_of(edge, d_.global_lat(), P);
        } else {
          if (s_.pole != PolePolicy::across_pole) continue;
          nearest = side == 0 ? 0 : P - 1;
        }
        for (const Run& run : runs) {
          if (run.side != side || run.beyond_pole != beyond || run.kind != Kind::copy) continue;
          rows += run.length;
          if (run.block != nearest) one_block = false;
        }
        const ShardRange src = d_.lat_range(nearest);
        if (!one_block || rows > src.length) {
          const int culprit = d_.rank_of({nearest, d_.coords_of(receiver).lon});
          throw InvalidArgument("HaloExchange (" + s_.width.str() + "): domain rank " + std::to_string(culprit) +
                                " owns latitudes [" + std::to_string(src.start) + ", " + std::to_string(src.end()) +
                                ") (" + std::to_string(src.length) + " rows), fewer than the " + std::to_string(rows) +
                                (beyond ? " across-the-pole" : "") + " halo rows it must send to domain rank " +
                                std::to_string(receiver) + "; use fewer ranks along latitude or a narrower halo");
        }
      }
    }
  }

  void check_lon(int receiver, int r, const std::vector<Run>& runs) const {
    const ShardRange own = d_.lon_range(r);
    const int P = d_.grid().lon;
    for (int side : {0, 2}) {
      std::int64_t edge = side == 0 ? own.start - 1 : own.end();
      if (s_.periodic_lon) {
        edge = wrap(edge, d_.global_lon());
      } else if (edge < 0 || edge >= d_.global_lon()) {
        continue;
      }
      const int nearest = block_of(edge, d_.global_lon(), P);
      std::int64_t cols = 0;
      bool one_block = true;
      for (const Run& run : runs) {
        if (run.side != side || run.kind != Kind::copy) continue;
        cols += run.length;
        if (run.block != nearest) one_block = false;
      }
      const ShardRange src = d_.lon_range(nearest);
      if (!one_block || cols > src.length) {
        const int culprit = d_.rank_of({d_.coords_of(receiver).lat, nearest});
        throw InvalidArgument("HaloExchange (" + s_.width.str() + "): domain rank " + std::to_string(culprit) +
                              " owns longitudes [" + std::to_string(src.start) + ", " + std::to_string(src.end()) +
                              ") (" + std::to_string(src.length) + " columns), fewer than the " + std::to_string(cols) +
                              " halo columns it must send to domain rank " + std::to_string(receiver) +
                              "; use fewer ranks along longitude or a narrower halo");
      }
    }
  }

  // Every halo piece of `receiver`, in the canonical order (lat runs, then lon runs).
  std::vector<Piece> pieces_of(int receiver) const {
    const GridCoords c = d_.coords_of(receiver);
    const LocalBox box = d_.box_of(receiver);
    const HaloWidths& w = s_.width;
    const std::vector<Run> lats = lat_runs(c.lat);
    check_lat(receiver, c.lat, lats);
    const std::vector<Run> lons_plain = lon_runs(c.lon, 0);
    check_lon(receiver, c.lon, lons_plain);
    std::vector<Run> lons_shifted;
    std::vector<Piece> pieces;
    for (const Run& lr : lats) {
      const std::vector<Run>* lons = &lons_plain;
      if (lr.shift != 0) {
        if (lons_shifted.empty()) lons_shifted = lon_runs(c.lon, lr.shift);
        lons = &lons_shifted;
      }
      for (const Run& cr : *lons) {
        if (lr.side == 1 && cr.side == 1) continue;  // the interior
        Piece p;
        p.direction = 3 * lr.side + cr.side;
        p.dst = {lr.dst - (box.lat.start - w.lat_before), cr.dst - (box.lon.start - w.lon_before), lr.length,
                 cr.length, 1};
        if (lr.kind == Kind::copy && cr.kind == Kind::copy) {
          p.src_rank = d_.rank_of({lr.block, cr.block});
          const ShardRange sl = d_.lat_range(lr.block), sc = d_.lon_range(cr.block);
          p.src = {lr.src - (sl.start - w.lat_before), cr.src - (sc.start - w.lon_before), lr.length, cr.length,
                   lr.step};
        }
        pieces.push_back(p);
      }
    }
    return pieces;
  }

 private:
  const Decomposition& d_;
  const HaloSpec& s_;
};

// The memory of one message. `packed` lives on the fields' device: the pack and unpack
// kernels of that device's backend read and write it. When MPI cannot address that
// memory (a CUDA device without CUDA-aware MPI), `staging` is a pinned host copy that
// MPI reads and writes, and the packed bytes cross to it and back; otherwise the packed
// bytes are the message (always so on the host: no extra copy).
class MessageBuffer {
 public:
  MessageBuffer() = default;
  ~MessageBuffer() { release(); }
  MessageBuffer(MessageBuffer&& other) noexcept { *this = std::move(other); }
  MessageBuffer& operator=(MessageBuffer&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      staged_ = other.staged_;
      bytes_ = std::exchange(other.bytes_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
      packed_ = std::exchange(other.packed_, nullptr);
      staging_ = std::exchange(other.staging_, nullptr);
    }
    return *this;
  }

  // Makes room for `bytes` on `device` (reusing the memory of earlier exchanges).
  void reserve(std::size_t bytes, Device device, bool staged) {
    if (!(device == device_) || staged != staged_ || bytes > capacity_) {
      release();
      device_ = device;
      staged_ = staged;
      capacity_ = bytes;
      packed_ = backend_for(device).allocate(bytes, device.index);
      if (staged) staging_ = tessera::detail::compute_for(device).allocate_pinned(bytes);
    }
    bytes_ = bytes;
  }

  std::byte* packed() const { return static_cast<std::byte*>(packed_); }
  void* message() const { return staged_ ? staging_ : packed_; }
  std::size_t bytes() const { return bytes_; }
  // Packed bytes to the message (after packing) and back (before unpacking).
  void packed_to_message() const {
    if (staged_) backend_for(device_).copy_to_host(staging_, packed_, bytes_, device_.index);
  }
  void message_to_packed() const {
    if (staged_) backend_for(device_).copy_from_host(packed_, staging_, bytes_, device_.index);
  }

 private:
  void release() noexcept {
    if (packed_ != nullptr) backend_for(device_).deallocate(packed_, capacity_, device_.index);
    if (staging_ != nullptr) tessera::detail::compute_for(device_).free_pinned(staging_);
    packed_ = staging_ = nullptr;
    capacity_ = bytes_ = 0;
  }

  Device device_ = Device::host();
  bool staged_ = false;
  std::size_t bytes_ = 0, capacity_ = 0;
  void* packed_ = nullptr;
  void* staging_ = nullptr;
};

// One message: its peer, direction, rectangles (in this rank's field) and buffer.
struct Transfer {
  int peer = 0;
  int direction = 0;
  std::vector<HaloRect> rects;
  std::int64_t cells = 0;  // sum of rect areas
  MessageBuffer buffer;
};

// A field as the pack entries see it.
struct FieldView {
  void* base = nullptr;
  DType dtype = DType::f32;
  std::size_t element = 0;
  tessera::detail::StridedLayout layout;
  std::int64_t leading = 1;  // product of leading extents
};

std::size_t align8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

}  // namespace

struct HaloExchange::Plan {
  Decomposition decomposition;
  HaloSpec spec;
  HaloPlanStats stats;
  WaitOptions wait;  // the domain communicator's policy and sleep interval
  std::vector<Transfer> sends;  // forward: this rank's interior rects, to peers
  std::vector<Transfer> recvs;  // forward: this rank's halo rects, from peers
  std::vector<HaloRect> self_from, self_to;  // pieces whose source is this rank: interior -> halo
  MessageBuffer self_buffer;                  // their packed cells (never sent)
  std::vector<HaloRect> zeros;  // halo rects filled with zeros
  std::vector<HaloRect> frame;  // the whole halo frame, zeroed by the adjoint
  std::int64_t padded_lat = 0, padded_lon = 0;

  // In flight.
  enum class Mode { idle, forward, adjoint } mode = Mode::idle;
  std::vector<Tensor> fields;  // kept alive until finish
  std::vector<FieldView> views;
  Device device = Device::host();  // where this exchange's fields live
  std::vector<MPI_Request> requests;
  // The field set last agreed on collectively; none before the first exchange, so even an
  // empty field set on one rank is agreed (never mistaken for "already agreed").
  std::optional<std::string> validated_signature;

  Plan(const Decomposition& d, HaloSpec s) : decomposition(d), spec(s) {}

  std::size_t buffer_bytes(std::int64_t cells) const {
    std::size_t bytes = 0;
    for (const FieldView& f : views) bytes = align8(bytes) + static_cast<std::size_t>(f.leading * cells) * f.element;
    return bytes;
  }

  // Sizes `buffer` for `cells` per field, staged through pinned host memory when MPI
  // cannot address the fields' device (never for the self buffer, which MPI never sees).
  void reserve(MessageBuffer& buffer, std::int64_t cells, bool for_mpi) const {
    buffer.reserve(buffer_bytes(cells), device, for_mpi && !mpi_can_address(device));
  }

  // Calls fn(field, rect, offset) for each field and rect in buffer order.
  template <class Fn>
  void for_each_slot(const std::vector<HaloRect>& rects, Fn&& fn) const {
    std::size_t offset = 0;
    for (const FieldView& f : views) {
      offset = align8(offset);
      for (const HaloRect& rect : rects) {
        fn(f, rect, offset);
        offset += static_cast<std::size_t>(f.leading * detail::halo_rect_area(rect)) * f.element;
      }
    }
  }

  void pack(const std::vector<HaloRect>& rects, const MessageBuffer& buffer) const {
    auto& compute = tessera::detail::compute_for(device);
    for_each_slot(rects, [&](const FieldView& f, const HaloRect& rect, std::size_t offset) {
      compute.halo_pack(f.dtype, f.base, f.layout, rect, buffer.packed() + offset, device.index);
    });
  }

  void unpack(const std::vector<HaloRect>& rects, const MessageBuffer& buffer, bool accumulate) const {
    auto& compute = tessera::detail::compute_for(device);
    for_each_slot(rects, [&](const FieldView& f, const HaloRect& rect, std::size_t offset) {
      compute.halo_unpack(f.dtype, f.base, f.layout, rect, buffer.packed() + offset, accumulate, device.index);
    });
  }

  void zero(const std::vector<HaloRect>& rects) const {
    auto& compute = tessera::detail::compute_for(device);
    for (const FieldView& f : views) {
      for (const HaloRect& rect : rects) compute.halo_zero(f.dtype, f.base, f.layout, rect, device.index);
    }
  }
};

HaloExchange::HaloExchange(const Decomposition& decomposition, HaloSpec spec)
    : plan_(std::make_unique<Plan>(decomposition, spec)) {
  Plan& p = *plan_;
  const Decomposition& d = p.decomposition;
  Planner planner(d, p.spec);
  planner.validate_spec();
  const int me = d.rank();
  const LocalBox box = d.box();
  const HaloWidths& w = p.spec.width;
  p.padded_lat = box.lat.length + w.lat_before + w.lat_after;
  p.padded_lon = box.lon.length + w.lon_before + w.lon_after;

  // Ordered maps: both ends post and pack in (peer, direction) order.
  std::map<std::pair<int, int>, Transfer> sends, recvs;
  for (int receiver = 0; receiver < d.size(); ++receiver) {
    for (const Piece& piece : planner.pieces_of(receiver)) {
      if (receiver == me) {
        if (piece.src_rank < 0) {
          p.zeros.push_back(piece.dst);
        } else if (piece.src_rank == me) {
          p.self_from.push_back(piece.src);
          p.self_to.push_back(piece.dst);
          p.stats.self_cells += detail::halo_rect_area(piece.dst);
        } else {
          Transfer& t = recvs[{piece.src_rank, piece.direction}];
          t.peer = piece.src_rank;
          t.direction = piece.direction;
          t.rects.push_back(piece.dst);
          t.cells += detail::halo_rect_area(piece.dst);
        }
      } else if (piece.src_rank == me) {
        Transfer& t = sends[{receiver, piece.direction}];
        t.peer = receiver;
        t.direction = piece.direction;
        t.rects.push_back(piece.src);
        t.cells += detail::halo_rect_area(piece.src);
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

  p.wait = d.comm().wait_options();
  require_same_on_all_ranks(d.comm().mpi_comm(),
                            shape_str(d.global_shape()) + " over " + d.grid().str() + " " + w.str() +
                                (p.spec.periodic_lon ? " periodic" : " bounded") + " " +
                                std::string(pole_policy_name(p.spec.pole)),
                            "HaloExchange: the ranks of the domain communicator passed different arguments");
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

namespace {

// Validates the fields of one exchange and describes them for the pack loops.
std::vector<FieldView> describe_fields(const std::vector<Tensor>& fields, std::int64_t padded_lat,
                                       std::int64_t padded_lon, int rank, const char* op) {
  std::vector<FieldView> views;
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const Tensor& t = fields[k];
    const std::string name = std::string("HaloExchange::") + op + ": field " + std::to_string(k);
    if (!t.defined()) throw InvalidArgument(name + " is undefined");
    backend_for(t.device()).require_usable(t, name);
    if (!(t.device() == fields[0].device())) {
      throw InvalidArgument(name + " " + t.str() + " is not on the device of field 0 " + fields[0].str() +
                            "; the fields of one exchange live on one device");
    }
    if (t.dim() < 2 || t.dim() > tessera::detail::kMaxDims) {
      throw ShapeError(name + " " + t.str() + " must have 2 to " + std::to_string(tessera::detail::kMaxDims) +
                       " dims (leading..., lat, lon)");
    }
    if (t.size(t.dim() - 2) != padded_lat || t.size(t.dim() - 1) != padded_lon) {
      throw ShapeError(name + " " + t.str() + " on domain rank " + std::to_string(rank) +
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
  return views;
}

std::string signature_of(const std::vector<Tensor>& fields) {
  std::string s;
  for (const Tensor& t : fields) s += (t.defined() ? t.str() : std::string("undefined")) + ";";
  return s;
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
static std::vector<FieldView> prepare(HaloExchange::Plan& p, const std::vector<Tensor>& fields, const char* op) {
  if (p.mode != HaloExchange::Plan::Mode::idle) {
    throw InvalidArgument(std::string("HaloExchange::") + op +
                          ": an exchange of this plan is still in flight; call finish() first");
  }
  const std::string signature = signature_of(fields);
  std::vector<FieldView> views;
  auto describe = [&] { views = describe_fields(fields, p.padded_lat, p.padded_lon, p.decomposition.rank(), op); };
  if (signature == p.validated_signature) {
    describe();
    return views;
  }
  const MPI_Comm comm = p.decomposition.comm().mpi_comm();
  agree_on_success(comm, describe);
  require_same_on_all_ranks(comm, shared_signature_of(fields),
      std::string("HaloExchange::") + op +
          " (field count, dtypes, leading dims): the ranks of the domain communicator passed different arguments");
  p.validated_signature = signature;
  return views;
}

static void post(HaloExchange::Plan& p, std::vector<Transfer>& incoming, std::vector<Transfer>& outgoing, int tag_base) {
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
    p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
    MPI_Request r = MPI_REQUEST_NULL;
    TESSERA_CHECK_MPI(MPI_Irecv(t.buffer.message(), check_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                tag_base + t.direction, comm, &r));
    p.requests.push_back(r);
  }
  for (Transfer& t : outgoing) {
    MPI_Request r = MPI_REQUEST_NULL;
    TESSERA_CHECK_MPI(MPI_Isend(t.buffer.message(), check_count(t.buffer.bytes()), MPI_BYTE, t.peer,
                                tag_base + t.direction, comm, &r));
    p.requests.push_back(r);
  }
}

namespace {

// Forward and adjoint exchanges are one procedure run in opposite directions. Forward:
// interior rects (sends) are packed and go out, halo rects (recvs) are filled. The
// adjoint (the transpose) runs every message backwards: halo rects are packed and sent to
// the rank they came from, which adds them into the interior rects it sent, and the halo
// is left zero.
void start_exchange(HaloExchange::Plan& p, const std::vector<Tensor>& fields, bool adjoint) {
  p.views = prepare(p, fields, adjoint ? "start_adjoint" : "start");
  p.fields = fields;
  p.device = fields.empty() ? Device::host() : fields.front().device();
  std::vector<Transfer>& outgoing = adjoint ? p.recvs : p.sends;
  std::vector<Transfer>& incoming = adjoint ? p.sends : p.recvs;
  for (Transfer& t : outgoing) {
    p.reserve(t.buffer, t.cells, /*for_mpi=*/true);
    p.pack(t.rects, t.buffer);
    t.buffer.packed_to_message();
  }
  post(p, incoming, outgoing, adjoint ? kAdjointTag : kForwardTag);
  p.mode = adjoint ? HaloExchange::Plan::Mode::adjoint : HaloExchange::Plan::Mode::forward;
  // Local work overlaps the messages in flight: pieces whose source is this rank go
  // through the self buffer (forward: interior -> halo; adjoint: halo added back into
  // the interior). Forward then zeroes the rows beyond a pole; the adjoint has packed or
  // added every halo value, so the transpose leaves zeros behind.
  std::int64_t self_cells = 0;
  for (const HaloRect& rect : p.self_from) self_cells += detail::halo_rect_area(rect);
  if (self_cells > 0) {
    p.reserve(p.self_buffer, self_cells, /*for_mpi=*/false);
    p.pack(adjoint ? p.self_to : p.self_from, p.self_buffer);
    p.unpack(adjoint ? p.self_from : p.self_to, p.self_buffer, adjoint);
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
  tessera::detail::wait_all(p.requests, p.wait);
  for (const Transfer& t : adjoint ? p.sends : p.recvs) {
    t.buffer.message_to_packed();
    p.unpack(t.rects, t.buffer, adjoint);
  }
  p.fields.clear();
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

}  // namespace tessera::domain
