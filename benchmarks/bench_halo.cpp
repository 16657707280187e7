// Halo exchange time and effective bandwidth against field size, halo width, fields
// per exchange and rank count, beside a raw MPI exchange of the same bytes with the
// same neighbours (MPI_Sendrecv of contiguous buffers, no packing): the reference the
// halo exchange's packing, planning and wait policy are measured against.
//
//   mpiexec -n 4 bench_halo [--lat=180,720] [--lon=360,1440] [--width=1,3] [--fields=1,4]
//                           [--channels=8] [--lon_width=0]
//                           [--small_lat=120] [--small_lon=400] [--small_fields=3]
//
// Effective bandwidth = bytes this rank sends per exchange / time (the maximum over
// ranks). Every halo/exchange iteration is followed by the raw exchange of the same
// bytes, timed the same way, so the two alternate through the run's slow and fast
// phases: counters sendrecv_us (the raw exchange's mean time) and vs_sendrecv = raw
// time / halo time, the halo exchange's bandwidth as a fraction of MPI_Sendrecv's.
//
// Both sides send bytes written since their last exchange, as a model's halo exchange
// does (its step computes the rows it sends): before each timed iteration, untimed, the
// interior rows the neighbours receive and the raw exchange's send buffer are rewritten.
// This matters on machines where moving cache lines another core has just written costs
// more than re-reading lines both cores already hold: a send buffer nobody writes stays
// in both cores' caches and its Sendrecv moves no data between cores (see
// docs/performance.md, "Halo exchange"). That optimistic reference is timed as well, in
// the same iteration, from a buffer written once: sendrecv_unwritten_us and
// vs_sendrecv_unwritten.
//
// halo/mpi_sendrecv runs the raw exchange (rewritten buffer) on its own. The field is
// (channels, lat, lon) f32, split along latitude over all ranks, periodic in longitude,
// zero-filled beyond the poles. --lon_width adds longitude halos of that width: with every
// rank owning whole latitude bands they are local periodic copies (no MPI), narrow strided
// rows that measure the pack and unpack loops.
//
// --device=cuda registers halo/device instead: the same exchange with the fields on this
// rank's GPU (pack, unpack and zero fills are kernels; messages go straight from device
// buffers with CUDA-aware MPI, else through pinned host buffers), beside a device-to-
// device copy of the same bytes (Tensor::copy_from between two contiguous device
// tensors), timed alternately in the same run: counters d2d_us and vs_d2d = copy time /
// halo time, the exchange's bandwidth as a fraction of the copy's. "The same bytes" are
// the cells the exchange fills from data (received and local-wrap cells, not the zero
// fills beyond the poles). On one rank with --lon_width > 0 every such cell is a local
// wrap, so the exchange is pure pack + unpack: it reads and writes each byte twice where
// the copy does so once, and 50 % is a pack and an unpack each at the copy's speed.
// Without a GPU the program says so and exits 0.
//
// halo/small is a climate code's case: a few f64 fields of a few hundred by about 100
// points (args lat, lon, fields), halo width 1, periodic in longitude, on the process
// grid such a code uses (1 x P; 2 x 2 at 4 ranks), beside the exchange the code would
// write by hand: one MPI_Isend/MPI_Irecv per neighbour and direction (8 with corners)
// carrying every field's strip, MPI_Waitall, the rows beyond the poles zeroed. Timed
// alternately in the same run: counters hand_us and vs_hand = hand time / tessera time
// (> 1: tessera is faster). The first exchange of each is compared cell by cell (the
// same messages, the same halos) and the program stops if they differ.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "bench_support.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

using namespace tessera;

namespace {

struct State : bench::World {
  std::int64_t channels = 8;
  int lon_width = 0;
  Device device;
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
  // What a model's step does to the rows it sends: writes them.
  void rewrite(float value) { std::fill(send_.begin(), send_.end(), value); }
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

// Writes `value` into the interior rows of `field` (a contiguous host f32 (channels,
// padded lat, padded lon) tensor) that the latitude neighbours receive: the first and
// last `width` rows of the interior, whole padded rows.
void rewrite_sent_rows(const Tensor& field, int width, float value) {
  const std::int64_t channels = field.size(0), lat = field.size(1), lon = field.size(2);
  const std::int64_t rows = std::min<std::int64_t>(width, lat - 2 * width);
  if (rows <= 0) return;
  auto* data = static_cast<float*>(field.data());
  for (std::int64_t c = 0; c < channels; ++c)
    for (const std::int64_t first : {std::int64_t{width}, lat - width - rows}) {
      float* row = data + (c * lat + first) * lon;
      std::fill(row, row + rows * lon, value);
    }
}

// The exchange both benchmarks time, for the arguments (lat, lon, width, fields) and
// its fields on `device`.
struct Exchange {
  domain::Decomposition decomposition;
  domain::HaloExchange halo;
  std::vector<Tensor> fields;

  Exchange(const benchmark::State& state, Device device)
      : decomposition(*g.comm, {g.channels, state.range(0), state.range(1)}), halo(decomposition, spec(state)) {
    for (std::int64_t f = 0; f < state.range(3); ++f) fields.push_back(halo.allocate(DType::f32, {g.channels}, device));
  }
  // Latitude halos are the messages between ranks; longitude halos are local wraps.
  static domain::HaloSpec spec(const benchmark::State& state) {
    const int width = static_cast<int>(state.range(2));
    domain::HaloSpec spec;
    spec.width = {width, width, g.lon_width, g.lon_width};
    spec.periodic_lon = true;
    return spec;
  }
};

void set_shape_counters(benchmark::State& state) {
  state.counters["ranks"] = g.comm->size();
  state.counters["lat"] = static_cast<double>(state.range(0));
  state.counters["lon"] = static_cast<double>(state.range(1));
  state.counters["width"] = static_cast<double>(state.range(2));
  state.counters["fields"] = static_cast<double>(state.range(3));
}

void BM_halo(benchmark::State& state) {
  const std::int64_t lon = state.range(1);
  const int width = static_cast<int>(state.range(2)), nfields = static_cast<int>(state.range(3));
  Exchange exchange(state, Device::host());
  domain::HaloExchange& halo = exchange.halo;
  const std::vector<Tensor>& fields = exchange.fields;
  RawExchange raw(lon, width, nfields), unwritten(lon, width, nfields);
  double total = 0, raw_total = 0, unwritten_total = 0;
  float value = 0;
  for (auto _ : state) {
    value += 1;
    for (const Tensor& field : fields) rewrite_sent_rows(field, width, value);
    const double t = bench::timed(*g.comm, [&] { halo.exchange(fields); });
    state.SetIterationTime(t);
    total += t;
    raw.rewrite(value);
    raw_total += bench::timed(*g.comm, raw);
    unwritten_total += bench::timed(*g.comm, unwritten);
  }
  const double bytes = static_cast<double>(halo.stats().send_cells) * g.channels * 4.0 * nfields;
  const double iterations = static_cast<double>(state.iterations());
  state.counters["bytes_sent"] = bytes;
  state.counters["GBps"] = bytes * iterations / total / 1e9;
  bench::report_peer(state, "sendrecv", raw_total, total);
  bench::report_peer(state, "sendrecv_unwritten", unwritten_total, total);
  state.counters["messages"] = halo.stats().send_messages;
  state.counters["node_memory_messages"] = halo.stats().node_memory_messages;  // of `messages`
  set_shape_counters(state);
}

// The device exchange beside a device-to-device copy of the bytes it fills from data.
void BM_halo_device(benchmark::State& state) {
  Exchange exchange(state, g.device);
  const domain::HaloPlanStats& stats = exchange.halo.stats();
  const std::int64_t floats = (stats.recv_cells + stats.self_cells) * g.channels * state.range(3);
  const Tensor from = Tensor::zeros({std::max<std::int64_t>(floats, 1)}, DType::f32, g.device);
  Tensor to = Tensor::zeros(from.shape(), DType::f32, g.device);
  // Untimed: the plan's buffers, the staging path and the kernels' first launches.
  exchange.halo.exchange(exchange.fields);
  to.copy_from(from);
  double total = 0, copy_total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] { exchange.halo.exchange(exchange.fields); }, g.device);
    state.SetIterationTime(t);
    total += t;
    copy_total += bench::timed(*g.comm, [&] { to.copy_from(from); }, g.device);
  }
  const double bytes = 4.0 * static_cast<double>(floats);
  state.counters["bytes_filled"] = bytes;
  state.counters["GBps"] = bytes * static_cast<double>(state.iterations()) / total / 1e9;
  bench::report_peer(state, "d2d", copy_total, total);
  state.counters["messages"] = stats.send_messages;
  set_shape_counters(state);
}

void BM_raw(benchmark::State& state) {
  RawExchange raw(state.range(1), static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  double total = 0;
  float value = 0;
  for (auto _ : state) {
    raw.rewrite(value += 1);
    const double t = bench::timed(*g.comm, raw);
    state.SetIterationTime(t);
    total += t;
  }
  state.counters["bytes_sent"] = raw.bytes_sent();
  state.counters["GBps"] = raw.bytes_sent() * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["ranks"] = g.comm->size();
}

// The machine's side of the comparison: how fast one core reads cache lines another core
// has just written (what every exchange of fresh data does, inside MPI or not), against
// re-reading lines it holds itself. Node ranks 0 and 1 share a window of `bytes`; each
// iteration rank 0 rewrites it, then rank 1 copies it out (timed) and copies a buffer of
// its own (timed apart). Counters: fresh_GBps and own_GBps. On the development VM the
// first switches between about 50 and 25 GB/s for minutes at a time while the second
// stays put, and the halo exchange's ratio to an unwritten Sendrecv follows it.
void BM_core_to_core(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  std::byte* base = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  MPI_Win_allocate_shared(node_rank == 0 ? static_cast<MPI_Aint>(bytes) : 0, 1, MPI_INFO_NULL, node, &base, &window);
  MPI_Aint size = 0;
  int unit = 0;
  std::byte* shared = nullptr;
  MPI_Win_shared_query(window, 0, &size, &unit, &shared);
  std::vector<std::byte> copy(bytes), own(bytes, std::byte{1});
  double fresh_total = 0, own_total = 0;
  unsigned char value = 0;
  for (auto _ : state) {
    if (node_rank == 0) std::memset(shared, ++value, bytes);
    MPI_Barrier(node);  // orders rank 0's stores before rank 1's loads (shared-memory barrier)
    double fresh = 0, mine = 0;
    if (node_rank == 1) {
      const double t0 = MPI_Wtime();
      std::memcpy(copy.data(), shared, bytes);
      const double t1 = MPI_Wtime();
      std::memcpy(copy.data(), own.data(), bytes);
      fresh = t1 - t0;
      mine = MPI_Wtime() - t1;
      benchmark::DoNotOptimize(copy.data());
    }
    fresh = bench::max_over_ranks(fresh, MPI_COMM_WORLD);
    own_total += bench::max_over_ranks(mine, MPI_COMM_WORLD);
    state.SetIterationTime(fresh);
    fresh_total += fresh;
  }
  MPI_Win_free(&window);
  MPI_Comm_free(&node);
  const double moved = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.counters["fresh_GBps"] = fresh_total > 0 ? moved / fresh_total / 1e9 : 0;
  state.counters["own_GBps"] = own_total > 0 ? moved / own_total / 1e9 : 0;
  state.counters["ranks_on_node"] = node_size;
}

// The exchange a climate code writes by hand for a (lat, lon) block with halo 1:
// neighbours from the process grid, longitude periodic, nothing beyond the poles.
class HandExchange {
 public:
  HandExchange(const domain::Decomposition& d, std::vector<Tensor> fields) : fields_(std::move(fields)) {
    const domain::GridCoords me = d.coords();
    const domain::LocalBox box = d.box();
    rows_ = box.lat.length;
    cols_ = box.lon.length;
    for (int di = -1; di <= 1; ++di)
      for (int dj = -1; dj <= 1; ++dj) {
        if (di == 0 && dj == 0) continue;
        Side side;
        side.send_tag = 3 * (1 - di) + (1 - dj);  // the slot it fills on the receiver
        side.recv_tag = 3 * (1 + di) + (1 + dj);
        const int q = me.lat + di;
        if (q >= 0 && q < d.grid().lat) side.peer = d.rank_of({q, (me.lon + dj + d.grid().lon) % d.grid().lon});
        side.send = strip(di, dj, false);
        side.recv = strip(di, dj, true);
        const std::size_t cells = static_cast<std::size_t>(side.send.rows * side.send.cols) * fields_.size();
        side.out.resize(cells);
        side.in.resize(cells);
        sides_.push_back(std::move(side));
      }
  }

  void operator()() {
    std::vector<MPI_Request> requests;
    for (Side& s : sides_) {
      if (s.peer == MPI_PROC_NULL) continue;
      requests.emplace_back();
      MPI_Irecv(s.in.data(), static_cast<int>(s.in.size()), MPI_DOUBLE, s.peer, s.recv_tag, g.raw, &requests.back());
    }
    for (Side& s : sides_) {
      if (s.peer == MPI_PROC_NULL) {
        for (const Tensor& f : fields_) copy_rect(f, s.recv, nullptr, /*to_field=*/true);  // zero beyond the pole
        continue;
      }
      double* out = s.out.data();
      for (const Tensor& f : fields_) out = copy_rect(f, s.send, out, false);
      requests.emplace_back();
      MPI_Isend(s.out.data(), static_cast<int>(s.out.size()), MPI_DOUBLE, s.peer, s.send_tag, g.raw, &requests.back());
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    for (Side& s : sides_) {
      if (s.peer == MPI_PROC_NULL) continue;
      double* in = s.in.data();
      for (const Tensor& f : fields_) in = copy_rect(f, s.recv, in, true);
    }
  }

 private:
  struct Rect {
    std::int64_t row = 0, col = 0, rows = 0, cols = 0;
  };
  struct Side {
    int peer = MPI_PROC_NULL, send_tag = 0, recv_tag = 0;
    Rect send, recv;
    std::vector<double> out, in;
  };

  // The interior strip facing direction (di, dj), or the halo strip there.
  Rect strip(int di, int dj, bool halo) const {
    const auto along = [&](int d, std::int64_t n, std::int64_t& first, std::int64_t& count) {
      count = d == 0 ? n : 1;
      first = d == 0 ? 1 : (d < 0 ? (halo ? 0 : 1) : (halo ? n + 1 : n));
    };
    Rect r;
    along(di, rows_, r.row, r.rows);
    along(dj, cols_, r.col, r.cols);
    return r;
  }

  // Copies `r` of field `f` (padded, contiguous f64) to `buffer` or back (nullptr: zeros).
  double* copy_rect(const Tensor& f, const Rect& r, double* buffer, bool to_field) const {
    auto* base = static_cast<double*>(f.data());
    const std::int64_t stride = cols_ + 2;
    for (std::int64_t i = 0; i < r.rows; ++i) {
      double* row = base + (r.row + i) * stride + r.col;
      if (buffer == nullptr) {
        std::fill(row, row + r.cols, 0.0);
        continue;
      }
      if (to_field) {
        std::copy(buffer, buffer + r.cols, row);
      } else {
        std::copy(row, row + r.cols, buffer);
      }
      buffer += r.cols;
    }
    return buffer;
  }

  std::vector<Tensor> fields_;
  std::int64_t rows_ = 0, cols_ = 0;
  std::vector<Side> sides_;
};

// Writes `value` into every interior cell of the fields (what a step does).
void rewrite_interior(const domain::HaloExchange& halo, const std::vector<Tensor>& fields, double value) {
  for (const Tensor& f : fields) {
    Tensor inside = halo.interior(f);
    const Tensor filled = Tensor::from_vector(std::vector<double>(static_cast<std::size_t>(inside.numel()), value),
                                              inside.shape());
    inside.copy_from(filled);
  }
}

void BM_small(benchmark::State& state) {
  const int size = g.comm->size();
  const domain::ProcessGrid grid = size == 4 ? domain::ProcessGrid{2, 2} : domain::ProcessGrid{1, size};
  const domain::Decomposition d(*g.comm, {state.range(0), state.range(1)}, grid);
  domain::HaloSpec spec;
  spec.width = domain::HaloWidths::uniform(1);
  domain::HaloExchange halo(d, spec);
  std::vector<Tensor> mine, theirs;
  for (std::int64_t f = 0; f < state.range(2); ++f) {
    mine.push_back(halo.allocate(DType::f64, {}));
    theirs.push_back(halo.allocate(DType::f64, {}));
  }
  HandExchange hand(d, theirs);
  // The same messages and halos: filled with distinct values, exchanged once each.
  for (std::size_t f = 0; f < mine.size(); ++f) {
    Tensor inside = halo.interior(mine[f]);
    std::vector<double> v(static_cast<std::size_t>(inside.numel()));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<double>(d.rank() * 100000 + f * 10000 + k + 1);
    inside.copy_from(Tensor::from_vector(v, inside.shape()));
    halo.interior(theirs[f]).copy_from(inside);
  }
  halo.exchange(mine);
  hand();
  for (std::size_t f = 0; f < mine.size(); ++f) {
    if (mine[f].to_vector<double>() != theirs[f].to_vector<double>()) {
      state.SkipWithError("halo/small: tessera's and the hand-written exchange's halos differ");
      return;
    }
  }
  double total = 0, hand_total = 0, value = 0;
  for (auto _ : state) {
    value += 1;
    rewrite_interior(halo, mine, value);
    const double t = bench::timed(*g.comm, [&] { halo.exchange(mine); });
    state.SetIterationTime(t);
    total += t;
    rewrite_interior(halo, theirs, value);
    hand_total += bench::timed(*g.comm, hand);
  }
  bench::report_peer(state, "hand", hand_total, total);
  state.counters["ranks"] = size;
  state.counters["grid_lat"] = grid.lat;
  state.counters["grid_lon"] = grid.lon;
  state.counters["messages"] = halo.stats().send_messages;
}

void register_all(const bench::Flags& flags) {
  g.open();
  g.channels = bench::int_list(flags.at("channels"), "channels").front();
  g.lon_width = static_cast<int>(bench::int_list(flags.at("lon_width"), "lon_width").front());
  g.device = bench::device();
  if (g.device.is_cuda()) {
    auto* device = benchmark::RegisterBenchmark("halo/device", BM_halo_device);
    for (const auto& [lat, lon] : bench::lat_lon_sizes(flags))
      for (long w : bench::int_list(flags.at("width"), "width"))
        for (long f : bench::int_list(flags.at("fields"), "fields")) device->Args({lat, lon, w, f});
    device->ArgNames({"lat", "lon", "width", "fields"})->UseManualTime()->Unit(benchmark::kMicrosecond);
    return;
  }
  auto* halo = benchmark::RegisterBenchmark("halo/exchange", BM_halo);
  auto* raw = benchmark::RegisterBenchmark("halo/mpi_sendrecv", BM_raw);
  for (const auto& [lat, lon] : bench::lat_lon_sizes(flags))
    for (long w : bench::int_list(flags.at("width"), "width"))
      for (long f : bench::int_list(flags.at("fields"), "fields")) {
        halo->Args({lat, lon, w, f});
        raw->Args({lat, lon, w, f});
      }
  // Needs two ranks on one node; 46080 bytes is the 180 x 360, width 1, 4-field message.
  // A fixed iteration count: the timed copy takes microseconds, so a minimum time would
  // ask for ~10^5 iterations, each with a barrier and two all-reduces that spin in MPI;
  // with more ranks than cores each of those costs milliseconds (4 ranks on 2 cores: the
  // probe ran for over 8 minutes).
  if (g.comm->size() >= 2) {
    benchmark::RegisterBenchmark("machine/core_to_core", BM_core_to_core)
        ->Arg(46080)
        ->Arg(1 << 20)
        ->ArgName("bytes")
        ->Iterations(200)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (auto* b : {halo, raw}) b->ArgNames({"lat", "lon", "width", "fields"})->UseManualTime()->Unit(benchmark::kMicrosecond);
  for (const auto& [lat, lon] : bench::lat_lon_sizes({{"lat", flags.at("small_lat")}, {"lon", flags.at("small_lon")}}))
    for (long f : bench::int_list(flags.at("small_fields"), "small_fields")) {
      benchmark::RegisterBenchmark("halo/small", BM_small)
          ->Args({lat, lon, f})
          ->ArgNames({"lat", "lon", "fields"})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_halo",
                    {{"lat", "180,720"},
                     {"lon", "360,1440"},
                     {"width", "1,3"},
                     {"fields", "1,4"},
                     {"channels", "8"},
                     {"lon_width", "0"},
                     {"small_lat", "120"},
                     {"small_lon", "400"},
                     {"small_fields", "3"},
                     {"device", "host"}},
                    register_all);
}
