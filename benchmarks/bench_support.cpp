#include "bench_support.hpp"

#include <cstdio>
#include <optional>
#include <sstream>

#include "tessera/backend.hpp"
#include "tessera/node.hpp"
#include "tessera/ops.hpp"
#include "tessera/version.hpp"
#include "tessera/wait_policy.hpp"

#ifndef TESSERA_GIT_HASH
#define TESSERA_GIT_HASH "unknown"
#endif

namespace tessera::bench {

namespace {

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  if (const auto newline = version.find('\n'); newline != std::string::npos) version.resize(newline);
  return version;
}

Device g_device = Device::host();

// --device of a program that takes it: the host, this rank's GPU, or nothing (empty:
// --device=cuda and some rank sees no GPU; the reason is in `why`). Collective.
std::optional<Device> settle_device(const std::string& flag, const NodeInfo& node, std::string& why) {
  if (flag == "host") return Device::host();
  if (flag != "cuda") throw ConfigError("--device: '" + flag + "' is neither host nor cuda");
  const int visible = cuda_device_count();
  int fewest = visible;
  MPI_Allreduce(&visible, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest == 0) {
    why = visible == 0 ? cuda_unavailable_reason() : "another rank sees no CUDA device";
    return std::nullopt;
  }
  return Device::cuda(node.local_rank % visible);
}

}  // namespace

Device device() { return g_device; }

void synchronize(Device device) {
  if (!device.is_host()) backend_for(device).synchronize(device.index);
}

std::vector<long> int_list(const std::string& text, const std::string& flag) {
  std::vector<long> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    try {
      std::size_t used = 0;
      out.push_back(std::stol(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw ConfigError("--" + flag + ": '" + item + "' is not an integer");
    }
  }
  if (out.empty()) throw ConfigError("--" + flag + ": empty list");
  return out;
}

std::vector<std::pair<long, long>> lat_lon_sizes(const Flags& flags) {
  const std::vector<long> lats = int_list(flags.at("lat"), "lat"), lons = int_list(flags.at("lon"), "lon");
  if (lats.size() != lons.size()) throw ConfigError("--lat and --lon need the same number of sizes");
  std::vector<std::pair<long, long>> sizes;
  for (std::size_t i = 0; i < lats.size(); ++i) sizes.emplace_back(lats[i], lons[i]);
  return sizes;
}

void report_peer(benchmark::State& state, const std::string& peer, double peer_total, double total) {
  state.counters[peer + "_us"] = 1e6 * peer_total / static_cast<double>(state.iterations());
  state.counters["vs_" + peer] = peer_total / total;
}

void World::open(const WaitOptions& wait) {
  comm = std::make_unique<Communicator>(MPI_COMM_WORLD, wait);
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  benchmark::AddCustomContext("wait_policy", std::string(wait_policy_name(comm->wait_policy())));
}

double max_over_ranks(double seconds, MPI_Comm comm) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, comm);
  return max;
}

int run(int argc, char** argv, const std::string& program, Flags flags,
        const std::function<void(const Flags&)>& register_benchmarks) {
  flags.emplace("threads", "auto");  // every program: host threads per rank, or auto
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  try {
    std::vector<char*> args = {argv[0]};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      bool own = false;
      for (auto& [name, value] : flags) {
        const std::string prefix = "--" + name + "=";
        if (a.rfind(prefix, 0) == 0) {
          value = a.substr(prefix.size());
          own = true;
        }
      }
      if (own) continue;
      if (rank != 0 && a.rfind("--benchmark_out", 0) == 0) continue;  // one writer
      args.push_back(argv[i]);
    }
    int n = static_cast<int>(args.size());
    benchmark::Initialize(&n, args.data());

    // Each rank gets its share of the node's cores for host GEMMs, unless --threads
    // fixes the count (strong-scaling baselines compare core for core: a 1-rank run
    // with every core of the node is not the "serial layer on one rank").
    const NodeInfo node = query_node(MPI_COMM_WORLD);
    const std::string threads = flags.at("threads");
    ops::set_host_threads(threads == "auto" ? ops::host_thread_share(node.usable_cores, node.local_size)
                                            : static_cast<int>(int_list(threads, "threads").front()));

    benchmark::AddCustomContext("tessera", std::string(version_string) + " (git " TESSERA_GIT_HASH ")");
    benchmark::AddCustomContext("ranks", std::to_string(size));
    benchmark::AddCustomContext("ranks_per_node", std::to_string(node.local_size));
    benchmark::AddCustomContext("usable_cores_per_node", std::to_string(node.usable_cores));
    benchmark::AddCustomContext("host_threads_per_rank", std::to_string(ops::host_threads()));
    benchmark::AddCustomContext("backend", cuda_device_count() > 0 ? "host+cuda" : "host");
    benchmark::AddCustomContext("cuda", cuda_library_versions());
    benchmark::AddCustomContext("mpi", mpi_library_version());
    for (const auto& [name, value] : flags) benchmark::AddCustomContext("flag_" + name, value);

    std::string no_gpu;
    if (const auto flag = flags.find("device"); flag != flags.end()) {
      const std::optional<Device> device = settle_device(flag->second, node, no_gpu);
      if (device) g_device = *device;
    }
    if (!no_gpu.empty()) {
      if (rank == 0) std::printf("%s: --device=cuda: no usable CUDA device (%s); nothing was run\n", program.c_str(), no_gpu.c_str());
    } else {
      if (g_device.is_cuda()) {
        // Which GPU, and how many of the node's ranks share it: with more than one the
        // collectives take the shared-GPU path (staged through host MPI), not NCCL.
        const int visible = cuda_device_count();
        benchmark::AddCustomContext("device", "cuda:" + std::to_string(g_device.index) + " of " +
                                                  std::to_string(visible) + " visible");
        benchmark::AddCustomContext("ranks_per_gpu",
                                    std::to_string((node.local_size - g_device.index + visible - 1) / visible));
      }
      register_benchmarks(flags);
      if (rank == 0) {
        benchmark::RunSpecifiedBenchmarks();
      } else {
        NullReporter quiet;
        benchmark::RunSpecifiedBenchmarks(&quiet);
      }
    }
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error on rank %d: %s\n", program.c_str(), rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}

}  // namespace tessera::bench
