// The caller's boxes (Decomposition::from_boxes): every rank's box gathered, then checked
// to tile the grid as a block layout, and the layout they describe.

#include <algorithm>
#include <string>
#include <tuple>

#include "comm/request_state.hpp"
#include "domain/decomposition_layout.hpp"
#include "tessera/check.hpp"
#include "tessera/error.hpp"

namespace tessera::domain {

// Every rank's (lat start, lat length, lon start, lon length), in rank order.
std::vector<LocalBox> all_boxes(const Communicator& comm, const LocalBox& mine, const char* who) {
  const std::int64_t sent[4] = {mine.lat.start, mine.lat.length, mine.lon.start, mine.lon.length};
  std::vector<std::int64_t> got(4 * static_cast<std::size_t>(comm.size()));
  MPI_Request request = MPI_REQUEST_NULL;
  TESSERA_CHECK_MPI(MPI_Iallgather(sent, 4, MPI_INT64_T, got.data(), 4, MPI_INT64_T, comm.mpi_comm(), &request));
  tessera::detail::wait_request(request, comm.wait_options(), {who, comm.mpi_comm()});
  std::vector<LocalBox> boxes;
  for (std::size_t r = 0; r < got.size(); r += 4) boxes.push_back({{got[r], got[r + 1]}, {got[r + 2], got[r + 3]}});
  return boxes;
}

namespace {

bool intersect(const ShardRange& a, const ShardRange& b) { return a.start < b.end() && b.start < a.end(); }

std::string rank_box(std::size_t r, const LocalBox& b) { return "rank " + std::to_string(r) + " (" + b.str() + ")"; }

// The first two ranks whose boxes share a cell, or an empty string.
std::string first_overlap(const std::vector<LocalBox>& boxes) {
  for (std::size_t a = 0; a < boxes.size(); ++a) {
    for (std::size_t b = a + 1; b < boxes.size(); ++b) {
      if (intersect(boxes[a].lat, boxes[b].lat) && intersect(boxes[a].lon, boxes[b].lon)) {
        return "the boxes of " + rank_box(a, boxes[a]) + " and " + rank_box(b, boxes[b]) + " overlap";
      }
    }
  }
  return {};
}

// The cuts of one axis: the distinct ranges of the boxes, which must follow each other
// from 0 to `n`. Returns the boundaries, or throws naming the first gap, overlap or cut
// that is not shared by a whole process-grid row (column).
std::vector<std::int64_t> axis_cuts(const std::vector<LocalBox>& boxes, bool lat, std::int64_t n,
                                    const std::string& what) {
  std::vector<ShardRange> ranges;
  for (const LocalBox& b : boxes) ranges.push_back(lat ? b.lat : b.lon);
  std::sort(ranges.begin(), ranges.end(),
            [](const ShardRange& a, const ShardRange& b) { return a.start != b.start ? a.start < b.start : a.length < b.length; });
  ranges.erase(std::unique(ranges.begin(), ranges.end()), ranges.end());
  const char* axis = lat ? "latitudes" : "longitudes";
  std::vector<std::int64_t> bounds{0};
  for (const ShardRange& r : ranges) {
    if (r.start > bounds.back()) {
      throw InvalidArgument(what + ": " + axis + " [" + std::to_string(bounds.back()) + ", " + std::to_string(r.start) +
                            ") are owned by no rank (a gap between the boxes)");
    }
    if (r.start < bounds.back()) {
      const std::string overlap = first_overlap(boxes);
      if (!overlap.empty()) throw InvalidArgument(what + ": " + overlap);
      // Two boxes in different rows (columns) cut the axis at different places.
      std::size_t a = 0, b = 0;
      for (std::size_t i = 0; i < boxes.size(); ++i) {
        const ShardRange& ri = lat ? boxes[i].lat : boxes[i].lon;
        if (ri == r) b = i;
        if (ri.end() == bounds.back() && ri.start < r.start + r.length) a = i;
      }
      throw InvalidArgument(what + ": the boxes of " + rank_box(a, boxes[a]) + " and " + rank_box(b, boxes[b]) +
                            " cut the " + axis + " at different places; tessera needs a block layout (the boxes "
                            "of one process-grid " + (lat ? "row share their latitudes" : "column share their longitudes") +
                            ", as in every Cartesian decomposition)");
    }
    bounds.push_back(r.end());
  }
  if (bounds.back() != n) {
    throw InvalidArgument(what + ": " + axis + " [" + std::to_string(bounds.back()) + ", " + std::to_string(n) +
                          ") are owned by no rank (the boxes end before the grid does)");
  }
  return bounds;
}

// Two ranks claiming the same box: found first (by sorting, not pairwise), since the
// cells they leave unowned elsewhere are only its consequence.
void check_no_twins(const std::vector<LocalBox>& boxes, const std::string& what) {
  const auto key = [&](std::size_t r) {
    const LocalBox& b = boxes[r];
    return std::tuple(b.lat.start, b.lat.length, b.lon.start, b.lon.length);
  };
  std::vector<std::size_t> order(boxes.size());
  for (std::size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b) || (key(a) == key(b) && a < b); });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (key(order[i - 1]) != key(order[i])) continue;
    throw InvalidArgument(what + ": the boxes of " + rank_box(order[i - 1], boxes[order[i - 1]]) + " and " +
                          rank_box(order[i], boxes[order[i]]) + " overlap");
  }
}

int cut_index(const std::vector<std::int64_t>& bounds, std::int64_t start) {
  return static_cast<int>(std::lower_bound(bounds.begin(), bounds.end(), start) - bounds.begin());
}

}  // namespace

std::shared_ptr<const Decomposition::Layout> boxes_layout(const std::vector<LocalBox>& boxes, const Shape& shape) {
  const std::int64_t nlat = shape[shape.size() - 2], nlon = shape.back();
  const std::string what = "Decomposition of " + shape_str(shape) + " (lat, lon last) from the " +
                           std::to_string(boxes.size()) + " ranks' boxes";
  for (std::size_t r = 0; r < boxes.size(); ++r) {
    const LocalBox& b = boxes[r];
    if (b.lat.length < 1 || b.lon.length < 1) throw InvalidArgument(what + ": " + rank_box(r, b) + " is empty");
    if (b.lat.start < 0 || b.lon.start < 0 || b.lat.length > nlat - b.lat.start || b.lon.length > nlon - b.lon.start) {
      throw InvalidArgument(what + ": " + rank_box(r, b) + " leaves the " + std::to_string(nlat) + " x " +
                            std::to_string(nlon) + " grid");
    }
  }
  check_no_twins(boxes, what);
  auto layout = std::make_shared<Decomposition::Layout>();
  layout->lat = axis_cuts(boxes, true, nlat, what);
  layout->lon = axis_cuts(boxes, false, nlon, what);
  layout->name = "caller's boxes";
  const ProcessGrid grid = layout->grid();
  std::vector<int> owner(static_cast<std::size_t>(grid.lat) * grid.lon, -1);
  for (std::size_t r = 0; r < boxes.size(); ++r) {
    const GridCoords c{cut_index(layout->lat, boxes[r].lat.start), cut_index(layout->lon, boxes[r].lon.start)};
    // A box spanning two cuts of the other axis overlaps the boxes that made the cut.
    if (layout->lat[c.lat + 1] != boxes[r].lat.end() || layout->lon[c.lon + 1] != boxes[r].lon.end()) {
      throw InvalidArgument(what + ": " + first_overlap(boxes));
    }
    int& slot = owner[static_cast<std::size_t>(c.lat) * grid.lon + c.lon];
    if (slot >= 0) {
      throw InvalidArgument(what + ": the boxes of " + rank_box(static_cast<std::size_t>(slot), boxes[slot]) +
                            " and " + rank_box(r, boxes[r]) + " overlap");
    }
    slot = static_cast<int>(r);
    layout->coords.push_back(c);
  }
  for (std::size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] >= 0) continue;
    const int q = static_cast<int>(i) / grid.lon, c = static_cast<int>(i) % grid.lon;
    const LocalBox hole{{layout->lat[q], layout->lat[q + 1] - layout->lat[q]},
                        {layout->lon[c], layout->lon[c + 1] - layout->lon[c]}};
    throw InvalidArgument(what + ": no rank owns " + hole.str() + " (a gap between the boxes)");
  }
  layout->index_ranks();
  return layout;
}


}  // namespace tessera::domain
