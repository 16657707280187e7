// domain::auto_process_grid: the shortest box boundary (halo per rank) among the grids
// of `ranks` ranks, latitude-major on ties, never a rank without cells; and a
// decomposition built on it at this run's rank count exchanges halos like any other.

#include <gtest/gtest.h>
#include <mpi.h>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;
using namespace tessera::domain;

TEST(AutoProcessGrid, ShortestBoundaryLatitudeMajorOnTies) {
  EXPECT_EQ(auto_process_grid(1, 10, 10), (ProcessGrid{1, 1}));
  EXPECT_EQ(auto_process_grid(4, 100, 100), (ProcessGrid{2, 2}));    // 100 < 125 (4x1 or 1x4)
  EXPECT_EQ(auto_process_grid(2, 100, 100), (ProcessGrid{2, 1}));    // a tie: latitude first
  EXPECT_EQ(auto_process_grid(4, 721, 1440), (ProcessGrid{2, 2}));   // 361 + 720 < 181 + 1440
  EXPECT_EQ(auto_process_grid(8, 721, 1440), (ProcessGrid{2, 4}));   // 361 + 360
  EXPECT_EQ(auto_process_grid(6, 32, 64), (ProcessGrid{2, 3}));      // 16 + 22 < 11 + 32
  EXPECT_EQ(auto_process_grid(7, 100, 3), (ProcessGrid{7, 1}));      // prime: a band each
  EXPECT_EQ(auto_process_grid(4, 2, 100), (ProcessGrid{1, 4}));      // 2 + 25 < 1 + 50; 4x1 impossible
  EXPECT_EQ(auto_process_grid(5, 3, 100), (ProcessGrid{1, 5}));      // 5 > 3 latitudes
}

TEST(AutoProcessGrid, ImpossibleRequestsAreNamed) {
  try {
    auto_process_grid(7, 2, 3);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no process grid of 7 ranks gives every rank a cell of a 2 x 3 grid"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(auto_process_grid(0, 4, 4), InvalidArgument);
  EXPECT_THROW(auto_process_grid(2, 0, 4), InvalidArgument);
}

TEST(AutoProcessGrid, ADecompositionOnItExchangesHalos) {
  Communicator world(MPI_COMM_WORLD);
  const ProcessGrid g = auto_process_grid(world.size(), 12, 16);
  Decomposition d(world, {12, 16}, g);
  EXPECT_EQ(d.grid(), g);
  HaloExchange ex(d, {HaloWidths::uniform(1), true, PolePolicy::zero});
  Tensor field = ex.allocate(DType::f64, {});
  const LocalBox box = d.box();
  const std::int64_t pn = field.size(1);
  for (std::int64_t i = 0; i < box.lat.length; ++i)
    for (std::int64_t j = 0; j < box.lon.length; ++j)
      field.data<double>()[(i + 1) * pn + (j + 1)] = static_cast<double>(100 * (box.lat.start + i) + box.lon.start + j);
  ex.exchange(field);
  // The halo cell west of the first owned cell holds the periodic neighbour's value.
  const std::int64_t west = (box.lon.start + 16 - 1) % 16;
  EXPECT_EQ(field.data<double>()[1 * pn + 0], static_cast<double>(100 * box.lat.start + west));
}
