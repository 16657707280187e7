// Halo exchange time and effective bandwidth against field size, halo width, fields
// per exchange and rank count, beside a raw MPI exchange of the same bytes with the
// same neighbours (MPI_Sendrecv of contiguous buffers, no packing): the reference the
// halo exchange's packing, planning and wait policy are measured against.
//
//   mpiexec -n 4 bench_halo [--lat=180,720] [--lon=360,1440] [--width=1,3] [--fields=1,4]
//                           [--channels=8] [--lon_width=0]
//
// Effective bandwidth = bytes this rank sends per exchange / time (the maximum over
// ranks). The field is (channels, lat, lon) f32, split along latitude over all ranks,
// periodic in longitude, zero-filled beyond the poles. --lon_width adds longitude halos
// of that width: with every rank owning whole latitude bands they are local periodic
// copies (no MPI), narrow strided rows that measure the pack and unpack loops.

#include <memory>

#include "bench_support.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;

namespace {

struct State {
  std::unique_ptr<Communicator> comm;
  MPI_Comm raw = MPI_COMM_NULL;
  std::int64_t channels = 8;
  int lon_width = 0;
};
State g;

void BM_halo(benchmark::State& state) {
  const std::int64_t lat = state.range(0), lon = state.range(1);
  const int width = static_cast<int>(state.range(2)), nfields = static_cast<int>(state.range(3));
  domain::Decomposition decomposition(*g.comm, {g.channels, lat, lon});
  domain::HaloSpec spec;
  // Latitude halos are the messages between ranks; longitude halos are local wraps.
  spec.width = {width, width, g.lon_width, g.lon_width};
  spec.periodic_lon = true;
  domain::HaloExchange halo(decomposition, spec);
  std::vector<Tensor> fields;
  for (int f = 0; f < nfields; ++f) fields.push_back(halo.allocate(DType::f32, {g.channels}));
  double total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] { halo.exchange(fields); });
    state.SetIterationTime(t);
    total += t;
  }
  const double bytes = static_cast<double>(halo.stats().send_cells) * g.channels * 4.0 * nfields;
  state.counters["bytes_sent"] = bytes;
  state.counters["GBps"] = bytes * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["messages"] = halo.stats().send_messages;
  state.counters["ranks"] = g.comm->size();
}

// The same bytes to the same neighbours, contiguous, with MPI_Sendrecv (north then south).
void BM_raw(benchmark::State& state) {
  const std::int64_t lon = state.range(1);
  const int width = static_cast<int>(state.range(2)), nfields = static_cast<int>(state.range(3));
  const int rank = g.comm->rank(), size = g.comm->size();
  const int north = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  const int south = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
  const std::int64_t count = static_cast<std::int64_t>(width) * lon * g.channels * nfields;
  std::vector<float> send(static_cast<std::size_t>(count), 1.0f), recv(static_cast<std::size_t>(count));
  double total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] {
      MPI_Sendrecv(send.data(), static_cast<int>(count), MPI_FLOAT, north, 1, recv.data(), static_cast<int>(count),
                   MPI_FLOAT, south, 1, g.raw, MPI_STATUS_IGNORE);
      MPI_Sendrecv(send.data(), static_cast<int>(count), MPI_FLOAT, south, 2, recv.data(), static_cast<int>(count),
                   MPI_FLOAT, north, 2, g.raw, MPI_STATUS_IGNORE);
    });
    state.SetIterationTime(t);
    total += t;
  }
  const int neighbours = (north != MPI_PROC_NULL) + (south != MPI_PROC_NULL);
  const double bytes = static_cast<double>(count) * 4.0 * neighbours;
  state.counters["bytes_sent"] = bytes;
  state.counters["GBps"] = bytes * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["ranks"] = size;
}

void register_all(const bench::Flags& flags) {
  g.comm = std::make_unique<Communicator>(MPI_COMM_WORLD);
  MPI_Comm_dup(MPI_COMM_WORLD, &g.raw);
  g.channels = bench::int_list(flags.at("channels"), "channels").front();
  g.lon_width = static_cast<int>(bench::int_list(flags.at("lon_width"), "lon_width").front());
  benchmark::AddCustomContext("wait_policy", std::string(wait_policy_name(g.comm->wait_policy())));
  const auto lats = bench::int_list(flags.at("lat"), "lat");
  const auto lons = bench::int_list(flags.at("lon"), "lon");
  if (lats.size() != lons.size()) throw ConfigError("--lat and --lon need the same number of sizes");
  auto* halo = benchmark::RegisterBenchmark("halo/exchange", BM_halo);
  auto* raw = benchmark::RegisterBenchmark("halo/mpi_sendrecv", BM_raw);
  for (std::size_t i = 0; i < lats.size(); ++i)
    for (long w : bench::int_list(flags.at("width"), "width"))
      for (long f : bench::int_list(flags.at("fields"), "fields")) {
        halo->Args({lats[i], lons[i], w, f});
        raw->Args({lats[i], lons[i], w, f});
      }
  for (auto* b : {halo, raw}) b->ArgNames({"lat", "lon", "width", "fields"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_halo",
                    {{"lat", "180,720"},
                     {"lon", "360,1440"},
                     {"width", "1,3"},
                     {"fields", "1,4"},
                     {"channels", "8"},
                     {"lon_width", "0"}},
                    register_all);
}
