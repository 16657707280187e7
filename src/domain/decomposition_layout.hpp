#pragma once
// Private to the domain floor: how a Decomposition holds its boxes (per-axis block
// boundaries and the rank at each grid position), and the caller's-boxes path that
// builds one from every rank's own box (box_layout.cpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"

namespace tessera::domain {

// The boxes as blocks: the cell boundaries along each axis, every rank's grid position
// and its inverse. Shared by the staggered decompositions of one grid.
struct Decomposition::Layout {
  std::vector<std::int64_t> lat, lon;  // grid.lat + 1 and grid.lon + 1 boundaries (cells)
  std::vector<GridCoords> coords;      // domain rank -> grid position
  std::vector<int> rank_at;            // grid position (q, c) -> rank, at q * grid.lon + c
  std::optional<bool> periodic_lat, periodic_lon;
  std::string name;

  ProcessGrid grid() const { return {static_cast<int>(lat.size()) - 1, static_cast<int>(lon.size()) - 1}; }
  void index_ranks() {
    rank_at.assign(coords.size(), -1);
    for (std::size_t r = 0; r < coords.size(); ++r) {
      rank_at[static_cast<std::size_t>(coords[r].lat) * (lon.size() - 1) + coords[r].lon] = static_cast<int>(r);
    }
  }
};

// Every rank's box, in rank order (one all-gather over `comm`, waited under its wait
// policy; `who` names the wait in a watchdog report). Collective.
std::vector<LocalBox> all_boxes(const Communicator& comm, const LocalBox& mine, const char* who);

// The layout the gathered `boxes` describe over a grid of `shape`. Pure arithmetic on
// data every rank holds alike, so every rank throws the same InvalidArgument (naming the
// ranks and boxes) when they are not a block layout without gap or overlap.
std::shared_ptr<const Decomposition::Layout> boxes_layout(const std::vector<LocalBox>& boxes, const Shape& shape);

}  // namespace tessera::domain
