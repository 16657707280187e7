// The halo exchange allocates nothing once a plan has seen its field set: repeated
// forward and adjoint exchanges reuse the plan's message buffers, datatypes, request
// list and field descriptions, and compare the field set without building strings. Counted through the
// global operator new of this test program (MPI's own C allocations are MPI's business).

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace tessera;
using namespace tessera::domain;

class HaloNoAlloc : public ::testing::TestWithParam<std::int64_t> {};

// 40 longitudes: every message packed; 200: the latitude messages go through MPI
// datatypes over the fields (rows of 800 bytes), built once for the field set.
INSTANTIATE_TEST_SUITE_P(PackedAndDirect, HaloNoAlloc, ::testing::Values(40, 200));

TEST_P(HaloNoAlloc, RepeatedExchangesAllocateNothing) {
  Communicator world(MPI_COMM_WORLD);
  allocations = 0;
  // Latitude halos between ranks (and zeros beyond the poles), longitude halos as local
  // periodic copies: every kind of piece the plan has.
  Decomposition decomposition(world, {3, 24, GetParam()});
  HaloSpec spec;
  spec.width = {2, 2, 1, 1};
  spec.periodic_lon = true;
  HaloExchange halo(decomposition, spec);
  std::vector<Tensor> fields = {halo.allocate(DType::f32, {3}), halo.allocate(DType::f64, {3})};
  halo.exchange(fields);  // the first exchange agrees on the field set and sizes the buffers
  halo.exchange_adjoint(fields);
  counting = true;
  for (int i = 0; i < 10; ++i) {
    halo.exchange(fields);
    halo.start(fields);
    halo.finish();
    halo.exchange_adjoint(fields);
  }
  counting = false;
  EXPECT_EQ(allocations.load(), 0);
  // A new field set is agreed again (and may allocate); the same set again does not.
  std::vector<Tensor> other = {halo.allocate(DType::f32, {3})};
  halo.exchange(other);
  allocations = 0;
  counting = true;
  halo.exchange(other);
  counting = false;
  EXPECT_EQ(allocations.load(), 0);
}
