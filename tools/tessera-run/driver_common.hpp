#pragma once
// What tessera-run's model setups (train_field_emulator.cpp, train_decoder.cpp) and its
// training loop (training_loop.cpp) share: the command-line options, rank-0 logging, the
// device, the mesh line, the per-rank memory plan table and
// the naming of a second data file's errors (data.validation).

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run_config.hpp"
#include "tessera/error.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"
#include "tessera/train/training_step.hpp"

namespace tessera::run {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool force = false;  // predict: replace an existing predict.output
  bool help = false;
  std::int64_t kill_after_step = -1;
};

// Rank 0 prints; the level filters. Lines are flushed so that a killed job keeps them.
class Log {
 public:
  Log(bool root, LogLevel level) : root_(root), level_(level) {}
  bool on(LogLevel l) const { return root_ && l <= level_; }
  void line(LogLevel l, const std::string& text) const {
    if (!on(l)) return;
    std::FILE* out = l <= LogLevel::warn ? stderr : stdout;
    std::fprintf(out, "%s%s\n", l == LogLevel::warn ? "tessera-run: warning: " : "", text.c_str());
    std::fflush(out);
  }
  void info(const std::string& t) const { line(LogLevel::info, t); }
  void debug(const std::string& t) const { line(LogLevel::debug, t); }
  void warn(const std::string& t) const { line(LogLevel::warn, t); }

 private:
  bool root_;
  LogLevel level_;
};

std::string fmt(const char* format, double a);

using train::make_optimizer;
using train::optimizer_kind;

// The device the run trains on (train::training_device over MPI_COMM_WORLD).
Device run_device(const RunConfig& cfg);

// Gives each rank its share of the node's cores for OpenBLAS (unless OPENBLAS_NUM_THREADS
// is set) and prints the version and mesh lines.
void start_run(const Log& log, const RunConfig& cfg, const Mesh& mesh);

// One row per rank, gathered to rank 0 and printed as the memory plan table.
// `range_label` names the column of [range_start, range_end) (e.g. "lat band").
// With activation checkpointing (`checkpointing` enabled), `activations_unchecked` is
// the activation estimate without it: a line under the table says what it saves.
void print_memory_plan(const Log& log, const Mesh& mesh, const std::string& range_label, std::int64_t range_start,
                       std::int64_t range_end, const dp::MemoryReport& report, std::int64_t activations,
                       std::int64_t data_bytes, const nn::CheckpointPolicy& checkpointing = {},
                       std::int64_t activations_unchecked = 0);

// Before a model of `parameters` f32 parameters is built (every rank builds the whole
// model first, then parallelism slices it): its values, gradients and optimizer state
// must fit in this rank's share of the node's available memory (MemAvailable / ranks on
// the node); otherwise every rank throws the same ConfigError naming `what`, the bytes
// needed and the bytes available, instead of one rank dying out of memory. The check is
// against host memory; on a CUDA device the model's allocation reports its own failure.
// Collective over the mesh's world.
void check_model_fits(const Mesh& mesh, const std::string& what, std::int64_t parameters,
                      dp::OptimizerKind optimizer);

// The whole of this rank's memory plan before a step (or a --dry-run's table) is taken
// as fitting: `state_bytes` (parameters, gradients, optimizer state, fsdp2's transient),
// `activation_bytes` (the estimate of one step's activations, which grows with the batch,
// the sequence or grid and the width) and `data_bytes` (the rank's data in memory),
// counted in long double so that no size overflows. More than this rank's share of the
// node's available memory (MemAvailable / ranks on the node) is the same ConfigError on
// every rank, naming `what`, the bytes of each part and `advice` (the keys that size the
// activations): the "needs N TiB" of check_model_fits, for the sizes it does not see.
// Host memory only, as check_model_fits. Collective over the mesh's world.
void check_memory_plan_fits(const Mesh& mesh, const std::string& what, long double state_bytes,
                            long double activation_bytes, long double data_bytes, const std::string& advice);

// A byte count in long double as the int64 the memory plan table prints: saturated at
// 9e18 bytes (more than any node), never an overflow.
std::int64_t saturated_bytes(long double bytes);

// `count` elements of `element_bytes` each, as the size of a host buffer, once they are
// known to fit in the node's available memory (MemAvailable): a file whose header
// declares a huge axis (damaged or hostile) is an IoError naming `what` and the bytes,
// not a bare std::bad_alloc or a machine driven into swap. `advice` says what to do
// (the default: for a file's axis). Local (no collective).
std::size_t host_buffer_elements(long double count, std::size_t element_bytes, const std::string& what,
                                 const std::string& advice = "the file's dimensions are damaged, or it needs more "
                                                             "ranks (parallelism.domain)");

// Runs `read` and returns its result; a ConfigError or IoError it throws is thrown again
// with `key` in front ("data.validation: ..."), for a second file read with the keys of
// the first, whose own messages name those keys.
template <class Read>
auto naming_key(const std::string& key, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const ConfigError& e) {
    throw ConfigError(key + ": " + e.what());
  } catch (const IoError& e) {
    throw IoError(key + ": " + e.what());
  }
}

// The log line of a bf16-mixed run's numerics (precision and, where the mesh reduces
// gradients at all, optimizer.reduce_dtype); empty for fp32 with f32 reductions, so
// fp32 logs read as they always did.
std::string precision_summary(const RunConfig& cfg, const Mesh& mesh);
// optimizer.reduce_dtype as the config spells it: "fp32" or "bf16".
std::string reduce_dtype_key(DType reduce_dtype);

// When data.validation is evaluated: "every 3 steps and at the last step" or "at the last step".
std::string evaluation_schedule(const ScheduleConfig& schedule);

using train::first_difference;

}  // namespace tessera::run
