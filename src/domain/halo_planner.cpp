// The halo planner: which cells of which rank fill which halo cells of which rank.
//
// Planning is pure arithmetic on the Decomposition. Each halo cell (i, j) of a rank,
// in global indices, maps through the latitude rule (inside the grid: itself; beyond a
// pole: zero, the edge row, or the mirrored row with a longitude shift of nlon/2) and
// the longitude rule (periodic wrap or zero) to an owned source cell or to zero. The two
// rules are separable, so each axis is cut into runs over which the source index moves
// by +1, -1 (across a pole) or 0 (the edge row, replicated) and stays on one rank; a run of rows times a run of columns is a piece: a
// rectangle copied from one rank's interior into another's halo. Every rank plans the
// pieces of every rank in the same order, which is how both ends of a message agree on
// its layout without exchanging any metadata.
//
// A staggered decomposition (Decomposition::staggered) plans the same way over its face
// indices. Only the latitude faces differ from the cells: their blocks are not
// shard_range's (the decomposition's lat_block_of inverts them), and their mirror
// across the pole is the other one of the two: faces of rows bounded by the poles
// have a face on each pole, so they mirror about that face (as pole-point rows mirror
// about the pole row), while the faces of pole-point rows lie symmetrically around the
// pole, which falls between faces -1 and 0 (as cell rows mirror between rows -1 and 0).

#include "domain/halo_planner.hpp"

#include <algorithm>
#include <string>

#include "tessera/error.hpp"

namespace tessera::domain::halo {

namespace {

enum class Kind { copy, zero, keep };  // keep: an edge policy `none` leaves the cell alone

// One edge's rule, the spec's overrides resolved.
enum class Rule { zero, none, replicate, periodic, mirror_even, mirror_odd, across_pole, across_pole_point };

bool copies(Rule rule) { return rule != Rule::zero && rule != Rule::none; }
bool across(Rule rule) { return rule == Rule::across_pole || rule == Rule::across_pole_point; }

Rule rule_of(EdgePolicy policy) {
  switch (policy) {
    case EdgePolicy::periodic: return Rule::periodic;
    case EdgePolicy::zero: return Rule::zero;
    case EdgePolicy::none: return Rule::none;
    case EdgePolicy::replicate: return Rule::replicate;
    case EdgePolicy::mirror_even: return Rule::mirror_even;
    case EdgePolicy::mirror_odd: return Rule::mirror_odd;
    case EdgePolicy::from_spec: break;
  }
  return Rule::zero;
}

Rule rule_of(PolePolicy pole) {
  switch (pole) {
    case PolePolicy::zero: return Rule::zero;
    case PolePolicy::replicate: return Rule::replicate;
    case PolePolicy::across_pole: return Rule::across_pole;
    case PolePolicy::across_pole_point: return Rule::across_pole_point;
  }
  return Rule::zero;
}

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
  bool negate = false;      // mirror_odd
};

// Where the side (before, inside, after the receiving box `own`) of index i ends.
std::int64_t side_end(std::int64_t i, const ShardRange& own, std::int64_t end) {
  if (i < own.start) return std::min(own.start, end);
  if (i < own.end()) return std::min(own.end(), end);
  return end;
}

std::int64_t wrap(std::int64_t j, std::int64_t n) { return ((j % n) + n) % n; }

void append(std::vector<Run>& runs, const Run& element) {
  if (!runs.empty()) {
    Run& last = runs.back();
    const bool same = last.kind == element.kind && last.side == element.side && last.shift == element.shift &&
                      last.beyond_pole == element.beyond_pole && last.negate == element.negate &&
                      last.dst + last.length == element.dst;
    if (same && element.kind != Kind::copy) {
      last.length += element.length;
      return;
    }
    if (same && element.length == 1 && last.block == element.block) {
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

// The runs of the receiving indices [first, end) along one axis, segment by segment, never
// index by index (a width or a grid can be huge: fuzz finding 4). `fill(e, i, stop)` sets
// the source of run e, which starts at index i (its destination and side already set),
// and returns where the run ends, at or before `stop`, the end of i's side of `own`.
template <class Fill>
std::vector<Run> segment_runs(const ShardRange& own, std::int64_t first, std::int64_t end, Fill&& fill) {
  std::vector<Run> runs;
  for (std::int64_t i = first; i < end;) {
    Run e;
    e.dst = i;
    e.side = i < own.start ? 0 : (i >= own.end() ? 2 : 1);
    const std::int64_t stop = fill(e, i, side_end(i, own, end));
    e.length = stop - i;
    append(runs, e);
    i = stop;
  }
  return runs;
}

class Planner {
 public:
  Planner(const Decomposition& d, const HaloSpec& spec) : d_(d), s_(spec) {}

  // Whether rows beyond a pole mirror about a row of this decomposition (source -i)
  // rather than about the boundary between rows -1 and 0 (source -1 - i); see the top.
  bool mirror_about_a_row() const {
    return (s_.pole == PolePolicy::across_pole_point) != (d_.stagger() == Stagger::lat_face);
  }
  const char* lat_noun() const { return d_.stagger() == Stagger::lat_face ? "latitude faces" : "latitudes"; }

  // The rule at the north (low) or south edge of latitude, the west or east of longitude.
  Rule lat_rule(bool low) const {
    const EdgePolicy e = low ? s_.north : s_.south;
    return e == EdgePolicy::from_spec ? rule_of(s_.pole) : rule_of(e);
  }
  Rule lon_rule(bool low) const {
    const EdgePolicy e = low ? s_.west : s_.east;
    if (e != EdgePolicy::from_spec) return rule_of(e);
    return s_.periodic_lon ? Rule::periodic : Rule::zero;
  }
  // validate_spec has checked that both edges of an axis agree on periodicity.
  bool lat_periodic() const { return lat_rule(true) == Rule::periodic; }
  bool lon_periodic() const { return lon_rule(true) == Rule::periodic; }

  void validate_spec() const {
    const HaloWidths& w = s_.width;
    const std::string what = "HaloExchange (" + w.str() + ", " + s_.str() + ")";
    if (w.lat_before < 0 || w.lat_after < 0 || w.lon_before < 0 || w.lon_after < 0) {
      throw InvalidArgument(what + ": halo widths must be >= 0");
    }
    validate_edges(what);
    if (across(lat_rule(true)) || across(lat_rule(false))) {
      const std::string name(pole_policy_name(s_.pole));
      if (d_.stagger() == Stagger::lat_face &&
          (s_.pole == PolePolicy::across_pole_point) != (d_.latitude_rows() == LatitudeRows::pole_points)) {
        throw InvalidArgument(what + ": the latitude faces of " +
                              (d_.latitude_rows() == LatitudeRows::pole_points ? "pole-point rows" : "cell rows") +
                              " cannot be mirrored by " + name + ", which is for " +
                              (s_.pole == PolePolicy::across_pole_point ? "pole-point rows" : "cell rows"));
      }
      if (!lon_periodic()) {
        throw InvalidArgument(what + ": " + name + " needs periodic longitude (the sphere wraps)");
      }
      if (d_.global_lon() % 2 != 0) {
        throw InvalidArgument(what + ": " + name + " needs an even longitude count, got " +
                              std::to_string(d_.global_lon()) + " (the halo is shifted by nlon/2)");
      }
    }
  }

  // The per-edge policies against each other and against what the decomposition knows.
  void validate_edges(const std::string& what) const {
    const auto name = [](Rule r) {
      static const char* names[] = {"zero", "none", "replicate", "periodic", "mirror_even", "mirror_odd",
                                    "across_pole", "across_pole_point"};
      return std::string(names[static_cast<int>(r)]);
    };
    if ((lat_rule(true) == Rule::periodic) != (lat_rule(false) == Rule::periodic)) {
      throw InvalidArgument(what + ": north is " + name(lat_rule(true)) + " and south " + name(lat_rule(false)) +
                            "; a periodic edge wraps to the opposite one, which must be periodic too");
    }
    if ((lon_rule(true) == Rule::periodic) != (lon_rule(false) == Rule::periodic)) {
      throw InvalidArgument(what + ": west is " + name(lon_rule(true)) + " and east " + name(lon_rule(false)) +
                            "; a periodic edge wraps to the opposite one, which must be periodic too");
    }
    for (bool low : {true, false}) {
      const Rule r = lon_rule(low);
      if (r == Rule::replicate || r == Rule::mirror_even || r == Rule::mirror_odd) {
        throw InvalidArgument(what + ": " + name(r) + " on the " + (low ? "west" : "east") +
                              " edge is not supported (longitude halos are copied column by column forward only; "
                              "use zero or none and fill the columns yourself)");
      }
    }
    if (d_.stagger() == Stagger::lat_face) {
      for (bool low : {true, false}) {
        const Rule r = lat_rule(low);
        const bool mirror = r == Rule::mirror_even || r == Rule::mirror_odd;
        if (r == Rule::periodic || (mirror && d_.latitude_rows() == LatitudeRows::pole_points)) {
          throw InvalidArgument(what + ": " + name(r) + " on the " + (low ? "north" : "south") +
                                " edge of latitude faces" +
                                (r == Rule::periodic ? "" : " of pole-point rows") + " is not supported");
        }
      }
    }
    const auto contradicts = [&](std::optional<bool> known, bool periodic, const char* axis) {
      if (!known || *known == periodic) return;
      throw InvalidArgument(what + ": the " + axis + " edges are " + (periodic ? "periodic" : "not periodic") +
                            ", but the decomposition's Cartesian communicator says " + axis + " is " +
                            (*known ? "periodic" : "not periodic") + " (its periods); one of the two is wrong");
    };
    contradicts(d_.periodic_lat(), lat_periodic(), "latitude");
    contradicts(d_.periodic_lon(), lon_periodic(), "longitude");
  }

  std::vector<Run> lat_runs(int q) const {
    const ShardRange own = d_.lat_range(q);
    const std::int64_t n = d_.global_lat();
    const std::int64_t first = own.start - s_.width.lat_before, end = own.end() + s_.width.lat_after;
    const Rule low_rule = lat_rule(true), high_rule = lat_rule(false);
    if ((first < -n && copies(low_rule)) || (end > 2 * n && copies(high_rule))) {
      // Beyond one grid's depth past a pole no cell can be copied (and walking a huge
      // width row by row would take minutes: fuzz finding 4).
      const bool low = first < -n;
      throw InvalidArgument("HaloExchange (" + s_.width.str() + "): a latitude halo of " +
                            std::to_string(low ? s_.width.lat_before : s_.width.lat_after) +
                            " rows reaches past both poles of a " + std::to_string(n) + "-latitude grid");
    }
    // Each run ends where the receiving side, the source block or the region (inside the
    // grid, beyond a pole) changes.
    return segment_runs(own, first, end, [&](Run& e, std::int64_t i, std::int64_t stop) {
      if (i >= 0 && i < n) {  // inside the grid: the row itself
        e.src = i;
        e.block = d_.lat_block_of(i);
        stop = std::min({stop, n, d_.lat_range(e.block).end()});
      } else {
        const bool low = i < 0;
        if (low) stop = std::min<std::int64_t>(stop, 0);
        e.beyond_pole = true;
        switch (low ? low_rule : high_rule) {
          case Rule::zero: e.kind = Kind::zero; break;
          case Rule::none: e.kind = Kind::keep; break;
          case Rule::replicate:  // the edge row, repeated: source step 0
            e.src = low ? 0 : n - 1;
            e.step = 0;
            break;
          case Rule::periodic:  // the rows at the other edge, in order
            e.src = wrap(i, n);
            break;
          case Rule::mirror_even:
          case Rule::mirror_odd: {
            // Mirrored about the edge: between rows -1 and 0 for cells, about the wall
            // face itself for latitude faces (face 0 and face n - 1 lie on the walls).
            const bool point = d_.stagger() == Stagger::lat_face;
            e.src = low ? (point ? -i : -1 - i) : (point ? 2 * (n - 1) - i : 2 * n - 1 - i);
            e.step = -1;
            e.negate = (low ? low_rule : high_rule) == Rule::mirror_odd;
            break;
          }
          case Rule::across_pole:  // mirrored about the pole between rows -1 and 0
          case Rule::across_pole_point: {  // mirrored about the pole row 0 (or n - 1)
            const bool point = mirror_about_a_row();
            e.src = low ? (point ? -i : -1 - i) : (point ? 2 * (n - 1) - i : 2 * n - 1 - i);
            e.step = -1;
            e.shift = d_.global_lon() / 2;
            break;
          }
        }
        if (e.kind == Kind::copy) {
          const std::int64_t last_src = e.src + e.step * (stop - 1 - i);
          if (e.src < 0 || e.src >= n || last_src < 0 || last_src >= n) {
            const int width = low ? s_.width.lat_before : s_.width.lat_after;
            throw InvalidArgument("HaloExchange: a latitude halo of " + std::to_string(width) +
                                  " rows reaches past both poles of a " + std::to_string(n) + "-latitude grid");
          }
          e.block = d_.lat_block_of(e.src);
          // Descending sources leave the block at its first row, ascending ones at its last.
          if (e.step == -1) stop = std::min(stop, i + (e.src - d_.lat_range(e.block).start) + 1);
          if (e.step == 1) stop = std::min(stop, i + (d_.lat_range(e.block).end() - e.src));
        }
      }
      return stop;
    });
  }

  std::vector<Run> lon_runs(int r, std::int64_t shift) const {
    const ShardRange own = d_.lon_range(r);
    const std::int64_t n = d_.global_lon();
    const std::int64_t first = own.start - s_.width.lon_before, end = own.end() + s_.width.lon_after;
    const bool periodic = lon_periodic();
    if (periodic && (first + shift < -2 * n || end + shift > 3 * n)) {
      // Around the ring twice: no rank holds such a halo (check_lon names the rank for
      // narrower ones), and walking a huge width column by column would take minutes
      // (fuzz finding 4).
      const bool low = first + shift < -2 * n;
      throw InvalidArgument("HaloExchange (" + s_.width.str() + "): a periodic longitude halo of " +
                            std::to_string(low ? s_.width.lon_before : s_.width.lon_after) +
                            " columns wraps around the whole " + std::to_string(n) + "-longitude ring");
    }
    // A run ends where the receiving side, the source block, the ring's wrap or the grid's
    // edge is.
    return segment_runs(own, first, end, [&](Run& e, std::int64_t j, std::int64_t stop) {
      const std::int64_t jj = j + shift;
      if (!periodic && (jj < 0 || jj >= n)) {  // zero or left alone beyond the edge
        e.kind = lon_rule(jj < 0) == Rule::none ? Kind::keep : Kind::zero;
        if (jj < 0) stop = std::min(stop, -shift);
      } else {
        e.src = periodic ? wrap(jj, n) : jj;
        e.block = d_.lon_block_of(e.src);
        stop = std::min(stop, j + (d_.lon_range(e.block).end() - e.src));  // to the block's end (and the wrap)
      }
      return stop;
    });
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
          nearest = d_.lat_block_of(edge);
        } else {
          if (!across(lat_rule(side == 0))) continue;  // other copies: each piece its own sender
          // Mirrored about a pole row, the rows skip the pole itself and may come from
          // the polar block and the next one: no single-sender rule (each piece has its
          // own sender; lat_runs has checked that every mirrored row exists). So may
          // latitude faces: a polar band of one pole-point row owns none.
          if (mirror_about_a_row() || d_.stagger() == Stagger::lat_face) continue;
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
                                " owns " + lat_noun() + " [" + std::to_string(src.start) + ", " +
                                std::to_string(src.end()) + ") (" + std::to_string(src.length) +
                                " rows), fewer than the " + std::to_string(rows) +
                                (beyond ? " across-the-pole" : "") + " halo rows it must send to domain rank " +
                                std::to_string(receiver) + "; use fewer ranks along latitude or a narrower halo");
        }
      }
    }
  }

  void check_lon(int receiver, int r, const std::vector<Run>& runs) const {
    const ShardRange own = d_.lon_range(r);
    for (int side : {0, 2}) {
      std::int64_t edge = side == 0 ? own.start - 1 : own.end();
      if (lon_periodic()) {
        edge = wrap(edge, d_.global_lon());
      } else if (edge < 0 || edge >= d_.global_lon()) {
        continue;
      }
      const int nearest = d_.lon_block_of(edge);
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
                              ") (" + std::to_string(src.length) + " columns), fewer than the " +
                              std::to_string(cols) +
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
        if (lr.kind == Kind::keep || cr.kind == Kind::keep) continue;  // an edge left to the caller
        Piece p;
        p.negate = lr.negate != cr.negate;
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

}  // namespace

void validate_spec(const Decomposition& d, const HaloSpec& spec) { Planner(d, spec).validate_spec(); }

std::vector<Piece> pieces_of(const Decomposition& d, const HaloSpec& spec, int receiver) {
  return Planner(d, spec).pieces_of(receiver);
}

}  // namespace tessera::domain::halo
