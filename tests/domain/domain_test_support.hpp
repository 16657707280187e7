#pragma once
// What the domain tests share: the world communicator, the process grids exercised at
// this world size, and the cell value that names its global coordinates.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"

namespace tessera::testing {

inline Communicator& world() {
  static Communicator comm(MPI_COMM_WORLD);
  return comm;
}

// Latitude bands, longitude bands (where they differ) and 2x2 at four ranks.
inline std::vector<domain::ProcessGrid> grids() {
  const int p = world_size();
  std::vector<domain::ProcessGrid> g{{p, 1}};
  if (p > 1) g.push_back({1, p});
  if (p == 4) g.push_back({2, 2});
  return g;
}

// A value naming (leading index, global lat, global lon); exact in f64 and f32.
inline double encode(std::int64_t lead, std::int64_t i, std::int64_t j) {
  return 1.0 + static_cast<double>(lead) * 1.0e6 + static_cast<double>(i) * 1000.0 + static_cast<double>(j);
}

}  // namespace tessera::testing
