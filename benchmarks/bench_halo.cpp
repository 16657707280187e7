// Halo exchange time and effective bandwidth against field size, halo width, fields
// per exchange and rank count, beside a raw MPI exchange of the same bytes with the
// same neighbours (MPI_Sendrecv of contiguous buffers, no packing): the reference the
// halo exchange's packing, planning and wait policy are measured against.
//
//   mpiexec -n 4 bench_halo [--lat=180,720] [--lon=360,1440] [--width=1,3] [--fields=1,4]
//                           [--channels=8] [--lon_width=0]
//
// Effective bandwidth = bytes this rank sends per exchange / time (the maximum over
// ranks). Every halo/exchange iteration is followed by the raw exchange of the same
// bytes, timed the same way, so the two alternate through the run's slow and fast
// phases: counters sendrecv_us (the raw exchange's mean time) and vs_sendrecv = raw
// time / halo time, the halo exchange's bandwidth as a fraction of MPI_Sendrecv's.
// halo/mpi_sendrecv runs the raw exchange on its own as well. The field is (channels, lat, lon) f32, split along latitude over all ranks,
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

// The reference: the same bytes to the same neighbours, contiguous, with MPI_Sendrecv
// (north then south).
class RawExchange {
 public:
  RawExchange(std::int64_t lon, int width, int nfields) {
    const int rank = g.comm->rank(), size = g.comm->size();
    north_ = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    south_ = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    count_ = static_cast<std::int64_t>(width) * lon * g.channels * nfields;
    send_.assign(static_cast<std::size_t>(count_), 1.0f);
    recv_.resize(static_cast<std::size_t>(count_));
  }
  void operator()() {
    MPI_Sendrecv(send_.data(), static_cast<int>(count_), MPI_FLOAT, north_, 1, recv_.data(), static_cast<int>(count_),
                 MPI_FLOAT, south_, 1, g.raw, MPI_STATUS_IGNORE);
    MPI_Sendrecv(send_.data(), static_cast<int>(count_), MPI_FLOAT, south_, 2, recv_.data(), static_cast<int>(count_),
                 MPI_FLOAT, north_, 2, g.raw, MPI_STATUS_IGNORE);
  }
  double bytes_sent() const {
    const int neighbours = (north_ != MPI_PROC_NULL) + (south_ != MPI_PROC_NULL);
    return static_cast<double>(count_) * 4.0 * neighbours;
  }

 private:
  int north_ = MPI_PROC_NULL, south_ = MPI_PROC_NULL;
  std::int64_t count_ = 0;
  std::vector<float> send_, recv_;
};

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
  RawExchange raw(lon, width, nfields);
  double total = 0, raw_total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] { halo.exchange(fields); });
    state.SetIterationTime(t);
    total += t;
    raw_total += bench::timed(*g.comm, raw);
  }
  const double bytes = static_cast<double>(halo.stats().send_cells) * g.channels * 4.0 * nfields;
  const double iterations = static_cast<double>(state.iterations());
  state.counters["bytes_sent"] = bytes;
  state.counters["GBps"] = bytes * iterations / total / 1e9;
  state.counters["sendrecv_us"] = 1e6 * raw_total / iterations;
  state.counters["vs_sendrecv"] = raw_total / total;
  state.counters["messages"] = halo.stats().send_messages;
  state.counters["ranks"] = g.comm->size();
  state.counters["lat"] = static_cast<double>(lat);
  state.counters["lon"] = static_cast<double>(lon);
  state.counters["width"] = width;
  state.counters["fields"] = nfields;
}

void BM_raw(benchmark::State& state) {
  RawExchange raw(state.range(1), static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  double total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, raw);
    state.SetIterationTime(t);
    total += t;
  }
  state.counters["bytes_sent"] = raw.bytes_sent();
  state.counters["GBps"] = raw.bytes_sent() * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["ranks"] = g.comm->size();
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
