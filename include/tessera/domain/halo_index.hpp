#pragma once
// The halo rectangle and its index math under the domain namespace. They live in
// tessera/detail/halo_rect.hpp (floor 0), where the compute backends can use them too.

#include "tessera/detail/halo_rect.hpp"

namespace tessera::domain::detail {

using tessera::detail::halo_element_offset;
using tessera::detail::halo_rect_area;
using tessera::detail::HaloRect;

}  // namespace tessera::domain::detail
