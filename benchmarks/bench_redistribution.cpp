// The coupling of a code to a model on fewer ranks (docs/coupling.md), measured two ways:
//
//   coupling/redistribute   a round trip (to_model, then to_code) of one f32 field of
//                           (channels, lat, lon) between the code's decomposition (the
//                           automatic 2-D grid over all N ranks) and a model on M ranks
//                           in latitude bands, beside MPI_Alltoallv of the same bytes
//                           between the same ranks from contiguous buffers (no packing,
//                           no plan): counters GBps (the whole field twice / time),
//                           alltoallv_us and vs_alltoallv = Alltoallv time / plan time;
//                           and the node-aware route on nodes of node_size ranks
//                           emulated with TESSERA_NODE_SIZE (node_aware_us,
//                           node_aware_vs_alltoallv, node_aware_vs_direct = direct time /
//                           node-aware time; internode_direct and internode_node_aware:
//                           the code -> model messages that cross between nodes);
//   coupling/inference      one CoupledModel::predict of the field emulator on M model
//                           ranks fed in the code's layout, beside the same model run on
//                           all N ranks in latitude bands with its input already in that
//                           layout: counters all_ranks_us and vs_all_ranks = all-N time /
//                           coupled time (> 1: the coupled call is faster).
//
//   mpiexec -n 4 bench_redistribution [--lat=180,720] [--lon=360,1440] [--channels=8]
//                                     [--models=1,2] [--node_size=1,2]
//                                     [--emulator_lat=64] [--emulator_lon=128]
//
// Every timed iteration of a tessera operation is followed by its reference, timed the
// same way (bench::timed), so the two alternate through the run's slow and fast phases.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "bench_support.hpp"
#include "tessera/agree.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/coupled_model.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/nn/module.hpp"

using namespace tessera;

namespace {

struct State : bench::World {
  std::int64_t channels = 8;
  std::int64_t emulator_lat = 64, emulator_lon = 128;
  std::string checkpoint;  // the emulator's, written once by rank 0 (which removes it)
  int rank = 0;
};
State g;

domain::ProcessGrid code_grid(std::int64_t lat, std::int64_t lon) {
  return domain::auto_process_grid(g.comm->size(), lat, lon);
}

// MPI_Alltoallv of the bytes the plan moves, between the same ranks: counts from the
// same box intersections, in both directions.
class RawAlltoallv {
 public:
  explicit RawAlltoallv(const domain::Redistribution& plan) {
    const domain::Decomposition& code = plan.code();
    const int n = code.size(), me = code.rank();
    to_model_send_.assign(static_cast<std::size_t>(n), 0);
    to_model_recv_.assign(static_cast<std::size_t>(n), 0);
    auto cells = [](const domain::LocalBox& a, const domain::LocalBox& b) {
      const std::int64_t lat = std::min(a.lat.end(), b.lat.end()) - std::max(a.lat.start, b.lat.start);
      const std::int64_t lon = std::min(a.lon.end(), b.lon.end()) - std::max(a.lon.start, b.lon.start);
      return lat > 0 && lon > 0 ? lat * lon : 0;
    };
    for (int m = 0; m < plan.model_size(); ++m) {
      const int peer = plan.model_ranks()[static_cast<std::size_t>(m)];
      to_model_send_[static_cast<std::size_t>(peer)] =
          static_cast<int>(cells(code.box(), plan.model_box_of(m)) * g.channels);
      if (peer == me) {
        for (int c = 0; c < n; ++c) {
          to_model_recv_[static_cast<std::size_t>(c)] =
              static_cast<int>(cells(code.box_of(c), plan.model_box_of(m)) * g.channels);
        }
      }
    }
    send_displs_ = displs(to_model_send_);
    recv_displs_ = displs(to_model_recv_);
    a_.assign(static_cast<std::size_t>(total(to_model_send_)) + 1, 1.0f);
    b_.assign(static_cast<std::size_t>(total(to_model_recv_)) + 1, 0.0f);
  }
  void operator()() {
    MPI_Alltoallv(a_.data(), to_model_send_.data(), send_displs_.data(), MPI_FLOAT, b_.data(), to_model_recv_.data(),
                  recv_displs_.data(), MPI_FLOAT, g.raw);
    MPI_Alltoallv(b_.data(), to_model_recv_.data(), recv_displs_.data(), MPI_FLOAT, a_.data(), to_model_send_.data(),
                  send_displs_.data(), MPI_FLOAT, g.raw);
  }

 private:
  static std::vector<int> displs(const std::vector<int>& counts) {
    std::vector<int> d(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
    return d;
  }
  static std::int64_t total(const std::vector<int>& counts) {
    std::int64_t t = 0;
    for (int c : counts) t += c;
    return t;
  }
  std::vector<int> to_model_send_, to_model_recv_, send_displs_, recv_displs_;
  std::vector<float> a_, b_;
};

// TESSERA_NODE_SIZE=k while a plan is built (the benchmark's communicator keeps the wait
// policy of the real node).
class EmulatedNodes {
 public:
  explicit EmulatedNodes(int k) {
    if (k > 0) setenv("TESSERA_NODE_SIZE", std::to_string(k).c_str(), 1);
  }
  ~EmulatedNodes() { unsetenv("TESSERA_NODE_SIZE"); }
  EmulatedNodes(const EmulatedNodes&) = delete;
  EmulatedNodes& operator=(const EmulatedNodes&) = delete;
};

int sum_over_ranks(int v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, g.raw);
  return v;
}

void BM_redistribute(benchmark::State& state) {
  const std::int64_t lat = state.range(0), lon = state.range(1);
  const int m = static_cast<int>(state.range(2)), node_size = static_cast<int>(state.range(3));
  domain::Decomposition code(*g.comm, {lat, lon}, code_grid(lat, lon));
  std::optional<domain::Redistribution> plan, aware;
  {
    EmulatedNodes nodes(node_size);
    plan.emplace(code, domain::ModelRanks::count(m), domain::ModelLayout{},
                 domain::RedistributionOptions{domain::RedistributionRoute::direct});
    aware.emplace(code, domain::ModelRanks::count(m), domain::ModelLayout{},
                  domain::RedistributionOptions{domain::RedistributionRoute::node_aware});
  }
  const Tensor field = Tensor::zeros(code.local_shape({g.channels}), DType::f32);
  const std::vector<Tensor> model =
      plan->is_model_rank() ? std::vector<Tensor>{Tensor::zeros(plan->model_shape({g.channels}), DType::f32)}
                            : std::vector<Tensor>{};
  RawAlltoallv raw(*plan);
  auto round_trip = [&](domain::Redistribution& p) {
    return bench::timed(*g.comm, [&] {
      p.to_model({field}, model);
      p.to_code(model, {field});
    });
  };
  // The three alternate within each iteration, so they share the run's slow and fast
  // phases; the two routes swap places every other iteration, so neither always runs
  // first after the Alltoallv.
  double total = 0, aware_total = 0, raw_total = 0;
  bool aware_first = false;
  for (auto _ : state) {
    if (aware_first) aware_total += round_trip(*aware);
    const double t = round_trip(*plan);
    state.SetIterationTime(t);
    total += t;
    if (!aware_first) aware_total += round_trip(*aware);
    raw_total += bench::timed(*g.comm, raw);
    aware_first = !aware_first;
  }
  const double bytes = 2.0 * static_cast<double>(lat * lon * g.channels) * 4.0;  // the whole field, both ways
  const double iterations = static_cast<double>(state.iterations());
  state.counters["bytes"] = bytes;
  state.counters["GBps"] = bytes * iterations / total / 1e9;
  bench::report_peer(state, "alltoallv", raw_total, total);
  state.counters["node_aware_us"] = 1e6 * aware_total / iterations;
  state.counters["node_aware_vs_alltoallv"] = raw_total / aware_total;
  state.counters["node_aware_vs_direct"] = total / aware_total;  // > 1: node_aware is faster
  state.counters["ranks"] = g.comm->size();
  state.counters["model_ranks"] = m;
  state.counters["node_size"] = node_size;
  state.counters["nodes"] = plan->stats().nodes;
  state.counters["messages"] = plan->stats().to_model_sends + plan->stats().to_code_sends;
  // Code -> model messages that cross between (emulated) nodes, all ranks together.
  state.counters["internode_direct"] = sum_over_ranks(plan->stats().internode_sends);
  state.counters["internode_node_aware"] = sum_over_ranks(aware->stats().internode_sends);
}

models::FieldEmulatorConfig emulator_config() {
  models::FieldEmulatorConfig c;
  c.channels = 3;
  c.width = 32;
  c.mlp_hidden = 64;
  c.n_blocks = 2;
  c.nlat = g.emulator_lat;
  c.nlon = g.emulator_lon;
  return c;
}

void write_checkpoint() {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tessera_bench_redistribution_" + std::to_string(::getpid())))
                         .string();
  broadcast_text(*g.comm, path, 0);  // rank 0's name
  // Rank 0 writes it; a failure there (a bad --emulator_lat, a full disk) is every rank's
  // error rather than a barrier the others wait in forever.
  agree_on_success(g.comm->mpi_comm(), [&] {
    if (g.comm->rank() != 0) return;
    Mesh self(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
    models::FieldEmulator model(emulator_config(), self);
    nn::initialize_parameters(model, 5);
    io::SaveOptions options;
    options.metadata = models::model_metadata(emulator_config());
    io::save_checkpoint(path, self, model, nullptr, options);
  });
  g.checkpoint = path;
  g.rank = g.comm->rank();
}

void BM_inference(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const std::int64_t lat = g.emulator_lat, lon = g.emulator_lon;
  domain::Decomposition code(*g.comm, {lat, lon}, code_grid(lat, lon));
  models::CoupledModel coupled(g.checkpoint, code, domain::ModelRanks::count(m), {1, false});
  const Tensor x = Tensor::zeros(code.local_shape({1, 3}), DType::f32);
  // The reference: the model on all N ranks in latitude bands, input in its layout.
  Mesh all(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, g.comm->size()});
  const std::unique_ptr<models::FieldEmulator> everywhere = load_model(g.checkpoint, all);
  const Tensor band = Tensor::zeros(everywhere->decomposition().local_shape({1, 3}), DType::f32);
  double total = 0, raw_total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] { (void)coupled.predict(x); });
    state.SetIterationTime(t);
    total += t;
    raw_total += bench::timed(*g.comm, [&] { (void)everywhere->predict(band); });
  }
  bench::report_peer(state, "all_ranks", raw_total, total);
  state.counters["ranks"] = g.comm->size();
  state.counters["model_ranks"] = m;
  state.counters["lat"] = static_cast<double>(lat);
  state.counters["lon"] = static_cast<double>(lon);
}

void register_all(const bench::Flags& flags) {
  g.open();
  g.channels = bench::int_list(flags.at("channels"), "channels").front();
  g.emulator_lat = bench::int_list(flags.at("emulator_lat"), "emulator_lat").front();
  g.emulator_lon = bench::int_list(flags.at("emulator_lon"), "emulator_lon").front();
  const auto sizes = bench::lat_lon_sizes(flags);
  std::vector<long> models;
  for (long m : bench::int_list(flags.at("models"), "models")) {
    if (m <= g.comm->size()) models.push_back(m);  // M > N is no coupling
  }
  write_checkpoint();
  const auto node_sizes = bench::int_list(flags.at("node_size"), "node_size");
  auto* redistribute = benchmark::RegisterBenchmark("coupling/redistribute", BM_redistribute);
  for (long k : node_sizes)
    for (const auto& [lat, lon] : sizes)
      for (long m : models) redistribute->Args({lat, lon, m, k});
  redistribute->ArgNames({"lat", "lon", "models", "node_size"});
  auto* inference = benchmark::RegisterBenchmark("coupling/inference", BM_inference);
  for (long m : models) inference->Args({m});
  inference->ArgNames({"models"});
  for (auto* b : {redistribute, inference}) b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  const int status = bench::run(argc, argv, "bench_redistribution",
                                {{"lat", "180,720"},
                                 {"lon", "360,1440"},
                                 {"channels", "8"},
                                 {"models", "1,2"},
                                 {"node_size", "1,2"},
                                 {"emulator_lat", "64"},
                                 {"emulator_lon", "128"}},
                                register_all);
  std::error_code ignored;
  if (g.rank == 0 && !g.checkpoint.empty()) std::filesystem::remove_all(g.checkpoint, ignored);
  return status;
}
