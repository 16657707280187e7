// The caller's decomposition taken as it is (issue 41): a Cartesian communicator in
// either dimension order, a split rule with the remainder on the last rank, and each
// rank's own box in any rank order. Each layout's boxes are checked against the code's
// own arithmetic, and a halo exchange on it against the serial rule every halo cell
// follows (domain_test_support.hpp); bad input fails on every rank, naming the ranks.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "domain_test_support.hpp"
#include "expect_error.hpp"
#include "tessera/error.hpp"

namespace tessera::testing {
namespace {

using domain::CartesianOrder;
using domain::Decomposition;
using domain::HaloExchange;
using domain::HaloSpec;
using domain::LocalBox;
using domain::SplitRule;

// Exchanges a two-level f64 field with halo `width` and checks every cell.
void expect_exact_halos(const Decomposition& d, HaloSpec spec) {
  HaloExchange ex(d, spec);
  Tensor field = ex.allocate(DType::f64, {2});
  fill_coordinates(ex, field);
  ex.exchange(field);
  EXPECT_EQ(check_coordinates(ex, field), "") << d.str();
}

HaloSpec halo(int width, bool periodic_lon) {
  HaloSpec spec;
  spec.width = domain::HaloWidths::uniform(width);
  spec.periodic_lon = periodic_lon;
  return spec;
}

// A 2-D Cartesian communicator over the world, dims {first, second}, periods given.
struct CartComm {
  MPI_Comm comm = MPI_COMM_NULL;
  CartComm(int first, int second, bool periodic_first, bool periodic_second) {
    int dims[2] = {first, second}, periods[2] = {periodic_first, periodic_second};
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &comm);
  }
  ~CartComm() { MPI_Comm_free(&comm); }
};

// The grids of this world size as (P_lon, P_lat), the code's Fortran order.
std::vector<std::pair<int, int>> lon_lat_dims() {
  const int p = world_size();
  std::vector<std::pair<int, int>> dims{{p, 1}, {1, p}};
  if (p == 4) dims.push_back({2, 2});
  return dims;
}

TEST(DecompositionLayouts, CartesianCommunicatorInLonLatOrderGivesTheCodesBoxesAndHalos) {
  for (auto [plon, plat] : lon_lat_dims()) {
    CartComm cart(plon, plat, true, false);
    Communicator comm(cart.comm);
    const Decomposition d = Decomposition::from_cartesian(comm, {2, 12, 16}, CartesianOrder::lon_lat);
    // The code's own view of this rank: coords (i, j) = (lon block, lat block).
    int coords[2];
    MPI_Cart_coords(cart.comm, comm.rank(), 2, coords);
    const LocalBox expected{shard_range(12, plat, coords[1]), shard_range(16, plon, coords[0])};
    EXPECT_EQ(d.box(), expected) << d.str();
    EXPECT_EQ(d.grid(), (domain::ProcessGrid{plat, plon}));
    EXPECT_EQ(d.periodic_lon(), std::optional<bool>(true));
    EXPECT_EQ(d.periodic_lat(), std::optional<bool>(false));
    EXPECT_NO_THROW(d.check_box(expected));
    expect_exact_halos(d, halo(1, true));
  }
}

TEST(DecompositionLayouts, CartesianCommunicatorInLatLonOrderMatchesTheRowMajorRule) {
  const int p = world_size();
  CartComm cart(p, 1, false, false);
  Communicator comm(cart.comm);
  const Decomposition d = Decomposition::from_cartesian(comm, {9, 8}, CartesianOrder::lat_lon, SplitRule::last_rank);
  EXPECT_EQ(d.box(), (LocalBox{{comm.rank() * (9 / p), comm.rank() == p - 1 ? 9 - (p - 1) * (9 / p) : 9 / p}, {0, 8}}));
  EXPECT_EQ(d.periodic_lon(), std::optional<bool>(false));
  expect_exact_halos(d, halo(1, false));
}

TEST(DecompositionLayouts, TheOldConstructorRefusesACartesianCommunicatorItCannotRead) {
  if (world_size() != 4) GTEST_SKIP() << "a square 2 x 2 Cartesian grid needs 4 ranks";
  CartComm cart(2, 2, true, false);
  Communicator comm(cart.comm);
  // The program: dims {lon, lat} = {2, 2} used to exchange with the wrong
  // neighbours (96 wrong halo cells, no error).
  expect_error<InvalidArgument>([&] { Decomposition d(comm, {12, 16}, {2, 2}); },
                                {"Cartesian", "(lat, lon)", "(lon, lat)", "from_cartesian"});
  // The same grid read with its order: correct halos.
  expect_exact_halos(Decomposition::from_cartesian(comm, {12, 16}, CartesianOrder::lon_lat), halo(1, true));
}

// (P_lon, P_lat) of every 2-D grid of this world size: at 6 ranks the non-square 3 x 2
// and 2 x 3 beside 6 x 1 and 1 x 6.
std::vector<std::pair<int, int>> every_lon_lat_dims() {
  std::vector<std::pair<int, int>> dims;
  for (int plon = 1; plon <= world_size(); ++plon) {
    if (world_size() % plon == 0) dims.push_back({plon, world_size() / plon});
  }
  return dims;
}

// Block i of `parts` blocks of n cells, by the code's own arithmetic under `rule`.
ShardRange code_block(std::int64_t n, int parts, int i, SplitRule rule) {
  const std::int64_t base = n / parts, extra = n % parts;
  if (rule == SplitRule::last_rank) return {i * base, i == parts - 1 ? n - (parts - 1) * base : base};
  return {i * base + std::min<std::int64_t>(i, extra), base + (i < extra ? 1 : 0)};
}

// The serial twin: the whole grid on this rank alone, filled by fill_coordinates and
// exchanged under `spec`. Every rank's padded field must equal its window over the box.
Tensor serial_exchange(const Shape& global, const HaloSpec& spec) {
  HaloExchange whole(Decomposition(self(), global), spec);
  Tensor field = whole.allocate(DType::f64, {global[0]});
  fill_coordinates(whole, field);
  whole.exchange(field);
  return field;
}

// Padded cell (a, b) of leading index l on domain rank r before the adjoint: distinct
// integers, so every sum the adjoint makes is exact in f64.
double adjoint_seed(int r, std::int64_t l, std::int64_t a, std::int64_t b) {
  return 1.0 + r * 100000.0 + static_cast<double>(l) * 10000.0 + static_cast<double>(a) * 100.0 +
         static_cast<double>(b);
}

// The adjoint's serial reference, from the halo rule alone: an interior cell keeps its
// own value plus every halo value, on any rank, whose source it is; halo cells are zero.
double adjoint_reference(const Decomposition& d, const HaloSpec& spec, std::int64_t l, std::int64_t i, std::int64_t j) {
  const LocalBox mine = d.box();
  const domain::HaloWidths w = spec.width;
  const bool inside = i >= mine.lat.start && i < mine.lat.end() && j >= mine.lon.start && j < mine.lon.end();
  if (!inside) return 0.0;
  double sum = adjoint_seed(d.rank(), l, i - mine.lat.start + w.lat_before, j - mine.lon.start + w.lon_before);
  for (int r = 0; r < d.size(); ++r) {
    const LocalBox box = d.box_of(r);
    for (std::int64_t a = 0; a < box.lat.length + w.lat_before + w.lat_after; ++a)
      for (std::int64_t b = 0; b < box.lon.length + w.lon_before + w.lon_after; ++b) {
        const std::int64_t hi = box.lat.start - w.lat_before + a, hj = box.lon.start - w.lon_before + b;
        const bool halo = hi < box.lat.start || hi >= box.lat.end() || hj < box.lon.start || hj >= box.lon.end();
        std::int64_t si = 0, sj = 0;
        if (halo && halo_source(hi, hj, d.global_lat(), d.global_lon(), spec, si, sj) && si == i && sj == j) {
          sum += adjoint_seed(r, l, a, b);
        }
      }
  }
  return sum;
}

// Every Cartesian communicator of this world size (at 6 ranks the non-square dims (lon,
// lat) = (3, 2) and (2, 3)), in both dimension orders, over uneven extents, halo 1:
// each rank's box against the code's arithmetic, the forward exchange against the
// serial twin's window, the adjoint against its serial reference.
TEST(DecompositionLayouts, EveryCartesianGridExchangesLikeTheSerialTwinForwardAndAdjoint) {
  const Shape global{2, 13, 17};  // 13 and 17 split unevenly over 2, 3 and 6 blocks
  const HaloSpec spec = halo(1, true);
  const Tensor serial = serial_exchange(global, spec);
  const std::int64_t serial_lat = serial.size(1), serial_lon = serial.size(2);
  const double* whole = serial.data<double>();
  // The code's (lon, lat) order under both split rules, tessera's (lat, lon) order under
  // its own rule (each case costs collectives: oversubscribed, about a second each).
  const std::pair<CartesianOrder, SplitRule> layouts[] = {{CartesianOrder::lon_lat, SplitRule::last_rank},
                                                          {CartesianOrder::lon_lat, SplitRule::first_ranks},
                                                          {CartesianOrder::lat_lon, SplitRule::first_ranks}};
  for (auto [plon, plat] : every_lon_lat_dims())
    for (const auto& [order, rule] : layouts) {
      const bool lon_first = order == CartesianOrder::lon_lat;
      CartComm cart(lon_first ? plon : plat, lon_first ? plat : plon, lon_first, !lon_first);
      Communicator comm(cart.comm);
      const Decomposition d = Decomposition::from_cartesian(comm, global, order, rule);
      int coords[2];
      MPI_Cart_coords(cart.comm, comm.rank(), 2, coords);
      const int lon_block = coords[lon_first ? 0 : 1], lat_block = coords[lon_first ? 1 : 0];
      const LocalBox expected{code_block(13, plat, lat_block, rule), code_block(17, plon, lon_block, rule)};
      const std::string where = d.str();
      EXPECT_EQ(d.box(), expected) << where;
      EXPECT_EQ(d.grid(), (domain::ProcessGrid{plat, plon})) << where;
      // The old constructor adopts the communicator's coordinates wherever its dims tell
      // the order apart (a square 2 x 2 is refused, tested above).
      if (rule == SplitRule::first_ranks && (plat != plon || plat == 1)) {
        EXPECT_EQ(Decomposition(comm, global, {plat, plon}).box(), expected) << "old constructor, " << where;
      }
      HaloExchange ex(d, spec);
      Tensor field = ex.allocate(DType::f64, {2});
      fill_coordinates(ex, field);
      ex.exchange(field);
      const auto twin = [&](std::int64_t l, std::int64_t i, std::int64_t j) {
        return whole[(l * serial_lat + i + 1) * serial_lon + j + 1];
      };
      EXPECT_EQ(check_cells(ex, field, twin), "") << "forward, " << where;
      double* p = field.data<double>();
      const std::int64_t pl = field.size(1), pn = field.size(2);
      for (std::int64_t l = 0; l < 2; ++l)
        for (std::int64_t a = 0; a < pl; ++a)
          for (std::int64_t b = 0; b < pn; ++b) p[(l * pl + a) * pn + b] = adjoint_seed(d.rank(), l, a, b);
      ex.exchange_adjoint(field);
      const auto reference = [&](std::int64_t l, std::int64_t i, std::int64_t j) {
        return adjoint_reference(d, spec, l, i, j);
      };
      EXPECT_EQ(check_cells(ex, field, reference), "") << "adjoint, " << where;
    }
}

TEST(DecompositionLayouts, LastRankTakesTheRemainder) {
  for (const domain::ProcessGrid& grid : grids()) {
    // 13 x 15: uneven over 2, 4 and 6 blocks, and every block holds the 2 rows of a
    // width-2 halo at 6 ranks.
    const Decomposition d = Decomposition::with_split(world(), {13, 15}, grid, SplitRule::last_rank);
    const domain::GridCoords c = d.coords();
    const auto block = [](std::int64_t n, int parts, int i) {
      return ShardRange{i * (n / parts), i == parts - 1 ? n - (parts - 1) * (n / parts) : n / parts};
    };
    EXPECT_EQ(d.box(), (LocalBox{block(13, grid.lat, c.lat), block(15, grid.lon, c.lon)})) << d.str();
    EXPECT_EQ(d.coords(), (domain::GridCoords{world_rank() / grid.lon, world_rank() % grid.lon}));
    expect_exact_halos(d, halo(1, true));
    expect_exact_halos(d, halo(2, false));
  }
}

// Every rank's box from the code's own arithmetic, in reversed rank order: rank r owns
// the block a row-major rule would give rank size - 1 - r, with uneven cuts (every
// block at least 2 x 2 at 6 ranks, for the width-2 halo).
LocalBox reversed_box(int rank, int size, domain::ProcessGrid grid) {
  const int slot = size - 1 - rank;
  const std::vector<std::int64_t> lat = domain::split_bounds(13, grid.lat, SplitRule::last_rank);
  const std::vector<std::int64_t> lon = domain::split_bounds(15, grid.lon, SplitRule::first_ranks);
  const int q = slot / grid.lon, c = slot % grid.lon;
  return {{lat[q], lat[q + 1] - lat[q]}, {lon[c], lon[c + 1] - lon[c]}};
}

TEST(DecompositionLayouts, EachRanksOwnBoxInAnyRankOrder) {
  for (const domain::ProcessGrid& grid : grids()) {
    const LocalBox mine = reversed_box(world_rank(), world_size(), grid);
    const Decomposition d = Decomposition::from_boxes(world(), {3, 13, 15}, mine);
    EXPECT_EQ(d.box(), mine);
    EXPECT_EQ(d.grid(), grid);
    for (int r = 0; r < world_size(); ++r) EXPECT_EQ(d.box_of(r), reversed_box(r, world_size(), grid));
    EXPECT_NO_THROW(d.check_box(mine));
    expect_exact_halos(d, halo(1, true));
    expect_exact_halos(d, halo(2, false));
    // Scatter and gather follow the boxes too.
    std::vector<double> values(3 * 13 * 15);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
    const Tensor global = Tensor::from_vector(values, {3, 13, 15});
    const Tensor local = d.scatter(global, DType::f64);
    const Tensor want = global.narrow(1, mine.lat.start, mine.lat.length).narrow(2, mine.lon.start, mine.lon.length);
    EXPECT_EQ(local.to_vector<double>(), want.contiguous().to_vector<double>());
    const Tensor back = d.gather(local);
    if (world_rank() == 0) EXPECT_EQ(back.to_vector<double>(), values);
  }
}

TEST(DecompositionLayouts, BadBoxesFailOnEveryRankNamingTheRanks) {
  const int p = world_size(), r = world_rank();
  if (p == 1) {
    expect_error<InvalidArgument>([&] { Decomposition::from_boxes(world(), {6, 8}, {{0, 6}, {0, 7}}); },
                                  {"longitudes [7, 8)", "owned by no rank"});
    expect_error<InvalidArgument>([&] { Decomposition::from_boxes(world(), {6, 8}, {{1, 6}, {0, 8}}); },
                                  {"rank 0", "leaves the 6 x 8 grid"});
    return;
  }
  // Latitude bands of 2 rows each over a 2p-row grid, with one fault at a time.
  const auto band = [](int q) { return LocalBox{{2 * q, 2}, {0, 8}}; };
  // Ranks 0 and 1 both claim rows [0, 2): an overlap (and rows [2p-2, 2p) have no owner).
  expect_error<InvalidArgument>(
      [&] { Decomposition::from_boxes(world(), {2 * p, 8}, r == 1 ? band(0) : band(r)); },
      {"rank 0 (lat [0, 2) x lon [0, 8))", "rank 1 (lat [0, 2) x lon [0, 8))", "overlap"});
  // The last rank stops one row short: a gap.
  expect_error<InvalidArgument>(
      [&] { Decomposition::from_boxes(world(), {2 * p + 1, 8}, band(r)); },
      {"latitudes [" + std::to_string(2 * p) + ", " + std::to_string(2 * p + 1) + ")", "owned by no rank"});
  // An empty box.
  expect_error<InvalidArgument>(
      [&] { Decomposition::from_boxes(world(), {2 * p, 8}, r == p - 1 ? LocalBox{{2 * r, 0}, {0, 8}} : band(r)); },
      {"rank " + std::to_string(p - 1), "is empty"});
  if (p == 4) {
    // 2 x 2 blocks whose two columns cut latitude at different rows: no block layout.
    const LocalBox staggered[4] = {{{0, 3}, {0, 4}}, {{0, 2}, {4, 4}}, {{3, 3}, {0, 4}}, {{2, 4}, {4, 4}}};
    expect_error<InvalidArgument>([&] { Decomposition::from_boxes(world(), {6, 8}, staggered[r]); },
                                  {"block layout", "cut the latitudes at different places"});
  }
}

TEST(DecompositionLayouts, CheckBoxNamesTheRankWhoseBoxDiffers) {
  const int p = world_size(), r = world_rank();
  const Decomposition d(world(), {4 * p, 6});
  LocalBox mine = d.box();
  EXPECT_NO_THROW(d.check_box(mine));
  // The code thinks the last rank holds the remainder differently: one row off.
  if (r == p - 1) mine.lat.length -= 1;
  expect_error<InvalidArgument>([&] { d.check_box(mine); },
                                {"domain rank " + std::to_string(p - 1), "expects to own", "gives it"});
}

}  // namespace
}  // namespace tessera::testing
