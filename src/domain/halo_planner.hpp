#pragma once
// Private: the halo planner of HaloExchange (halo_planner.cpp explains the method). It
// cuts every rank's halo frame into pieces: rectangles copied from one rank's interior,
// or zero-filled. Pure arithmetic on the Decomposition, identical on every rank.

#include <vector>

#include "tessera/detail/halo_rect.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

namespace tessera::domain::halo {

struct Piece {
  int src_rank = -1;  // -1: zero fill
  // 3 * lat_side + lon_side of the halo slot on the receiving rank (side: 0 before,
  // 1 inside, 2 after): the message tag's offset.
  int direction = 0;
  tessera::detail::HaloRect src;  // in the source rank's padded field
  tessera::detail::HaloRect dst;  // in the receiving rank's padded field
  bool negate = false;  // mirror_odd: the receiver negates the copied values
};

// Throws InvalidArgument for widths < 0, an across_pole spec on a grid it cannot serve
// (non-periodic longitude, odd longitude count), or edge policies that contradict each
// other or the decomposition's known periodicity.
void validate_spec(const Decomposition& d, const HaloSpec& spec);

// Every halo piece of domain rank `receiver`, in the canonical order (lat runs, then lon
// runs) both ends of a message rely on. Cells beyond an edge whose policy is `none` have
// no piece (nothing touches them). Throws InvalidArgument, naming both ranks, when
// a rank owns fewer rows or columns than the halo it must send.
std::vector<Piece> pieces_of(const Decomposition& d, const HaloSpec& spec, int receiver);

}  // namespace tessera::domain::halo
