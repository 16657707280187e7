#include "driver_common.hpp"


#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

#include "tessera/agree.hpp"
#include "tessera/check.hpp"
#include "tessera/ops.hpp"
#include "tessera/version.hpp"

namespace tessera::run {

std::string fmt(const char* format, double a) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, a);
  return buffer;
}

Device run_device(const RunConfig& cfg) { return train::training_device(cfg, MPI_COMM_WORLD); }

void start_run(const Log& log, const RunConfig& cfg, const Mesh& mesh) {
  // OpenBLAS starts one thread per core in every process; with several ranks on a node
  // that oversubscribes every GEMM. Each rank gets its share, unless the user said.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    ops::set_host_threads(ops::host_thread_share(mesh.usable_cores(), mesh.local_size()));
  }
  log.info("tessera-run " + std::string(TESSERA_VERSION_STRING) + ": " + cfg.source);
  const auto& c = mesh.config();
  log.info("mesh: " + std::to_string(mesh.world_size()) + " ranks = dp " + std::to_string(mesh.dp_size()) + " x tp " +
           std::to_string(mesh.tp_size()) + " x domain " + std::to_string(mesh.domain_size()) + " (data " +
           std::string(data_parallel_mode_name(c.data)) + "), " + std::to_string(mesh.local_size()) +
           " ranks on rank 0's node, wait policy " + std::string(wait_policy_name(mesh.wait_policy())) +
           ", BLAS threads per rank " + std::to_string(ops::host_threads()) + ", device " +
           mesh.device().str() + " (device: " + cfg.device + ")");
}

void print_memory_plan(const Log& log, const Mesh& mesh, const std::string& range_label, std::int64_t range_start,
                       std::int64_t range_end, const dp::MemoryReport& report, std::int64_t activations,
                       std::int64_t data_bytes, const nn::CheckpointPolicy& checkpointing,
                       std::int64_t activations_unchecked) {
  const std::array<std::int64_t, 10> mine = {mesh.coords().dp,      mesh.coords().tp,       mesh.coords().domain,
                                             range_start,            range_end,
                                             report.parameter_bytes, report.gradient_bytes, report.optimizer_bytes,
                                             activations + report.transient_bytes, data_bytes};
  // Through the communicator (its wait policy), not a raw MPI_Gather.
  Tensor gathered = Tensor::zeros({static_cast<std::int64_t>(mine.size()) * mesh.world_size()}, DType::i64);
  mesh.world().all_gather(Tensor::from_vector<std::int64_t>({mine.begin(), mine.end()},
                                                            {static_cast<std::int64_t>(mine.size())}),
                          gathered);
  const std::vector<std::int64_t> all = gathered.to_vector<std::int64_t>();
  if (!log.on(LogLevel::error)) return;
  char line[256];
  std::snprintf(line, sizeof line, "%5s %3s %3s %4s %12s %11s %11s %11s %11s %11s %11s", "rank", "dp", "tp", "dom",
                range_label.c_str(), "params", "grads", "optimizer", "activations", "data", "total");
  std::string table = std::string("per-rank memory plan (activations are an estimate; fsdp2 adds its largest "
                                  "gathered unit):\n") + line;
  for (int r = 0; r < mesh.world_size(); ++r) {
    const std::int64_t* v = all.data() + static_cast<std::size_t>(r) * mine.size();
    const std::string band = "[" + std::to_string(v[3]) + ", " + std::to_string(v[4]) + ")";
    std::int64_t total = 0;
    for (int i = 5; i < 10; ++i) total += v[i];
    std::snprintf(line, sizeof line, "%5d %3lld %3lld %4lld %12s %11s %11s %11s %11s %11s %11s", r,
                  static_cast<long long>(v[0]), static_cast<long long>(v[1]), static_cast<long long>(v[2]),
                  band.c_str(), dp::format_bytes(v[5]).c_str(), dp::format_bytes(v[6]).c_str(),
                  dp::format_bytes(v[7]).c_str(), dp::format_bytes(v[8]).c_str(), dp::format_bytes(v[9]).c_str(),
                  dp::format_bytes(total).c_str());
    table += "\n" + std::string(line);
  }
  if (checkpointing.enabled()) {
    // Rank 0's estimate (the ranks of one layout hold alike shards of the activations).
    table += "\nactivation checkpointing (" + checkpointing.str() + "): rank 0's activations " +
             dp::format_bytes(activations) + " instead of " + dp::format_bytes(activations_unchecked) +
             " without it (saves " + dp::format_bytes(activations_unchecked - activations) + ")";
  }
  std::printf("%s\n", table.c_str());
  std::fflush(stdout);
}

namespace {

// MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read (not Linux).
std::int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return -1;
  char line[256];
  std::int64_t kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long value = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &value) == 1) {
      kib = value;
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

}  // namespace

std::size_t host_buffer_elements(long double count, std::size_t element_bytes, const std::string& what,
                                 const std::string& advice) {
  const long double bytes = count * static_cast<long double>(element_bytes);
  const std::int64_t available = available_memory_bytes();
  const long double limit = available < 0 ? 9.0e18L : static_cast<long double>(available);
  if (count < 0 || bytes > limit) {
    throw IoError(what + " needs " + dp::format_bytes(static_cast<std::int64_t>(std::min(bytes, 9.0e18L))) +
                  " in memory, more than the node has available (" + dp::format_bytes(available) +
                  "): " + advice);
  }
  return static_cast<std::size_t>(count);
}

void check_model_fits(const Mesh& mesh, const std::string& what, std::int64_t parameters,
                      dp::OptimizerKind optimizer) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    if (!mesh.device().is_host()) return;
    const std::int64_t available = available_memory_bytes();
    if (available < 0) return;
    const std::int64_t share = available / std::max(1, mesh.local_size());
    const int copies = 2 + dp::optimizer_state_tensors(optimizer);  // value, gradient, state
    const long double needed = static_cast<long double>(parameters) * sizeof(float) * copies;
    if (needed > static_cast<long double>(share)) {
      throw ConfigError(what + " has " + std::to_string(parameters) + " parameters: their values, gradients and " +
                        std::string(dp::optimizer_kind_name(optimizer)) + " state need " +
                        dp::format_bytes(static_cast<std::int64_t>(std::min<long double>(needed, 9.0e18L))) +
                        " per rank, more than this rank's share of the node's available memory (" +
                        dp::format_bytes(share) + " = MemAvailable / " + std::to_string(mesh.local_size()) +
                        " ranks); make the model smaller or spread the ranks over more nodes");
    }
  });
}

std::int64_t saturated_bytes(long double bytes) {
  return bytes < 0 ? 0 : static_cast<std::int64_t>(std::min(bytes, 9.0e18L));
}

void check_memory_plan_fits(const Mesh& mesh, const std::string& what, long double state_bytes,
                            long double activation_bytes, long double data_bytes, const std::string& advice) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    if (!mesh.device().is_host()) return;
    const std::int64_t available = available_memory_bytes();
    if (available < 0) return;
    const std::int64_t share = available / std::max(1, mesh.local_size());
    const long double needed = state_bytes + activation_bytes + data_bytes;
    if (needed <= static_cast<long double>(share)) return;
    throw ConfigError(what + ": this rank's memory plan needs " + dp::format_bytes(saturated_bytes(needed)) +
                      " (activations of one step " + dp::format_bytes(saturated_bytes(activation_bytes)) +
                      " (an estimate), parameters, gradients and optimizer state " +
                      dp::format_bytes(saturated_bytes(state_bytes)) + ", data " +
                      dp::format_bytes(saturated_bytes(data_bytes)) +
                      "), more than this rank's share of the node's available memory (" + dp::format_bytes(share) +
                      " = MemAvailable / " + std::to_string(mesh.local_size()) + " ranks); " + advice);
  });
}

std::string precision_summary(const RunConfig& cfg, const Mesh& mesh) {
  if (cfg.precision == Precision::fp32 && cfg.optimizer.reduce_dtype == DType::f32) return "";
  std::string s = "precision: " + std::string(precision_name(cfg.precision));
  if (cfg.precision == Precision::bf16_mixed) s += " (bf16 GEMM operands, fp32 accumulation; f32 master weights)";
  const bool reduces = mesh.dp_size() > 1 || mesh.tp_size() > 1 || mesh.domain_size() > 1;
  if (reduces) return s + ", gradients reduced in " + std::string(dtype_name(cfg.optimizer.reduce_dtype));
  if (cfg.optimizer.reduce_dtype != DType::f32) s += ", no gradient reduction on this mesh (optimizer.reduce_dtype unused)";
  return s;
}

std::string reduce_dtype_key(DType reduce_dtype) { return reduce_dtype == DType::bf16 ? "bf16" : "fp32"; }

std::string evaluation_schedule(const ScheduleConfig& schedule) {
  if (schedule.eval_every <= 0) return "at the last step";
  return "every " + std::to_string(schedule.eval_every) + " steps and at the last step";
}

}  // namespace tessera::run
