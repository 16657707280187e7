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
                      last.beyond_pole == element.beyond_pole && last.dst + last.length == element.dst;
    if (same && element.kind == Kind::zero) {
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

  void validate_spec() const {
    const HaloWidths& w = s_.width;
    const std::string what = "HaloExchange (" + w.str() + ", pole " + std::string(pole_policy_name(s_.pole)) + ")";
    if (w.lat_before < 0 || w.lat_after < 0 || w.lon_before < 0 || w.lon_after < 0) {
      throw InvalidArgument(what + ": halo widths must be >= 0");
    }
    if (mirrors_across_pole(s_.pole)) {
      const std::string name(pole_policy_name(s_.pole));
      if (d_.stagger() == Stagger::lat_face &&
          (s_.pole == PolePolicy::across_pole_point) != (d_.latitude_rows() == LatitudeRows::pole_points)) {
        throw InvalidArgument(what + ": the latitude faces of " +
                              (d_.latitude_rows() == LatitudeRows::pole_points ? "pole-point rows" : "cell rows") +
                              " cannot be mirrored by " + name + ", which is for " +
                              (s_.pole == PolePolicy::across_pole_point ? "pole-point rows" : "cell rows"));
      }
      if (!s_.periodic_lon) {
        throw InvalidArgument(what + ": " + name + " needs periodic longitude (the sphere wraps)");
      }
      if (d_.global_lon() % 2 != 0) {
        throw InvalidArgument(what + ": " + name + " needs an even longitude count, got " +
                              std::to_string(d_.global_lon()) + " (the halo is shifted by nlon/2)");
      }
    }
  }

  std::vector<Run> lat_runs(int q) const {
    const ShardRange own = d_.lat_range(q);
    const std::int64_t n = d_.global_lat();
    const std::int64_t first = own.start - s_.width.lat_before, end = own.end() + s_.width.lat_after;
    if (s_.pole != PolePolicy::zero && (first < -n || end > 2 * n)) {
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
        switch (s_.pole) {
          case PolePolicy::zero: e.kind = Kind::zero; break;
          case PolePolicy::replicate:  // the edge row, repeated: source step 0
            e.src = low ? 0 : n - 1;
            e.step = 0;
            break;
          case PolePolicy::across_pole:  // mirrored about the pole between rows -1 and 0
          case PolePolicy::across_pole_point: {  // mirrored about the pole row 0 (or n - 1)
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
          // Descending sources leave the block at its first row.
          if (e.step == -1) stop = std::min(stop, i + (e.src - d_.lat_range(e.block).start) + 1);
        }
      }
      return stop;
    });
  }

  std::vector<Run> lon_runs(int r, std::int64_t shift) const {
    const ShardRange own = d_.lon_range(r);
    const std::int64_t n = d_.global_lon();
    const std::int64_t first = own.start - s_.width.lon_before, end = own.end() + s_.width.lon_after;
    if (s_.periodic_lon && (first + shift < -2 * n || end + shift > 3 * n)) {
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
      if (!s_.periodic_lon && (jj < 0 || jj >= n)) {  // zero beyond the edge
        e.kind = Kind::zero;
        if (jj < 0) stop = std::min(stop, -shift);
      } else {
        e.src = s_.periodic_lon ? wrap(jj, n) : jj;
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
          if (!mirrors_across_pole(s_.pole)) continue;
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
      if (s_.periodic_lon) {
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

}  // namespace

void validate_spec(const Decomposition& d, const HaloSpec& spec) { Planner(d, spec).validate_spec(); }

std::vector<Piece> pieces_of(const Decomposition& d, const HaloSpec& spec, int receiver) {
  return Planner(d, spec).pieces_of(receiver);
}

}  // namespace tessera::domain::halo
