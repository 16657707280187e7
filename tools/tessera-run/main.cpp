// tessera-run: the srun/mpiexec-launched training driver (docs/driver.md).
//
//   tessera-run [train] CONFIG.yaml [--dry-run] [--set KEY=VALUE ...] [--kill-after-step N]
//               [--kill-during-save N]
//   tessera-run stats CONFIG.yaml [--set KEY=VALUE ...]     (field_stats.hpp)
//   tessera-run predict CONFIG.yaml [--set KEY=VALUE ...] [--force]   (predict_field_emulator.hpp)
//
// Trains the field emulator (train_field_emulator.cpp) to predict the next state of a
// gridded dataset on a (dp, tp, domain) mesh, or an imported ONNX graph on the same data
// (model.type: onnx, train_onnx_model.cpp), or (model.type: decoder, train_decoder.cpp)
// the decoder-only transformer on a token stream on a (dp, tp) mesh, both through the
// one training loop of training_loop.cpp, with checkpoints and resume. The config
// is parsed on every rank before MPI_Init: a bad config fails every rank alike, rank 0
// reports it once, and every rank exits with status 1 (2 for a usage error). SIGTERM or
// SIGUSR1 stops the run at the next step boundary with a checkpoint and status 75
// (kExitRequeue, training_loop.hpp): Slurm preemption and time-limit warnings.

#include <mpi.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "driver_common.hpp"
#include "field_stats.hpp"
#include "predict_field_emulator.hpp"
#include "predict_onnx_model.hpp"
#include "run_config.hpp"
#include "train_decoder.hpp"
#include "train_field_emulator.hpp"
#include "train_onnx_model.hpp"
#include "training_loop.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera::run {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage: tessera-run [train] CONFIG.yaml [--dry-run] [--set KEY=VALUE ...] [--kill-after-step N]\n"
    "       tessera-run stats CONFIG.yaml [--set KEY=VALUE ...]\n"
    "       tessera-run predict CONFIG.yaml [--set KEY=VALUE ...] [--force]\n"
    "  train (the default)  train the config's model\n"
    "  stats                write the per-channel mean and std of data.path to data.stats\n"
    "  predict              roll a field-emulator or onnx checkpoint forward predict.steps steps from\n"
    "                       predict.initial_time and write a CF netCDF file (predict.output)\n"
    "                       on the input's grid, coordinates and orientation\n"
    "  --dry-run            validate the config and the data, print the mesh and the per-rank\n"
    "                       memory plan, and exit without training\n"
    "  --force              predict: replace predict.output if it exists (without it, an\n"
    "                       existing predict.output is an error and nothing is written)\n"
    "  --set KEY=VALUE      override a config key (dotted path, VALUE as YAML), e.g.\n"
    "                       --set parallelism.tensor=2 --set resume=latest\n"
    "  --kill-after-step N  test hook: every rank kills itself (SIGKILL) after step N, as a\n"
    "                       crashed or preempted job would\n"
    "  --kill-during-save N test hook: every rank is killed (SIGKILL) while writing the\n"
    "                       checkpoint of step N\n"
    "  --stop-signals LIST  the signals that stop the run at the next step with a\n"
    "                       checkpoint and status 75 (default TERM,USR1; also USR2, INT,\n"
    "                       HUP, QUIT)\n"
    "  --help               this text\n"
    "Launch with mpiexec -n N or srun; see docs/driver.md for the config keys.\n"
    "A stop signal (SIGTERM or SIGUSR1 by default): stop after the current step,\n"
    "checkpoint, exit with status 75.\n";

// Throws InvalidArgument (a usage error) for anything it does not understand.
Options parse_args(int argc, char** argv, std::int64_t& kill_during_save, std::vector<int>& stop_signals,
                   std::string& mode) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(flag + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--dry-run") {
      o.dry_run = true;
    } else if (a == "--force") {
      o.force = true;
    } else if (a == "--set") {
      o.overrides.push_back(value(a));
    } else if (a.rfind("--set=", 0) == 0) {
      o.overrides.push_back(a.substr(6));
    } else if (a == "--kill-after-step") {
      const std::string v = value(a);
      char* end = nullptr;
      o.kill_after_step = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || o.kill_after_step < 1) {
        throw InvalidArgument("--kill-after-step needs an integer >= 1, got '" + v + "'");
      }
    } else if (a == "--kill-during-save") {
      const std::string v = value(a);
      char* end = nullptr;
      kill_during_save = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || kill_during_save < 1) {
        throw InvalidArgument("--kill-during-save needs an integer >= 1, got '" + v + "'");
      }
    } else if (a == "--stop-signals") {
      stop_signals = parse_stop_signals(value(a));
    } else if (a.rfind("--stop-signals=", 0) == 0) {
      stop_signals = parse_stop_signals(a.substr(15));
    } else if (!a.empty() && a[0] == '-') {
      throw InvalidArgument("unknown option '" + a + "'");
    } else if (o.config.empty() && mode.empty() && (a == "train" || a == "stats" || a == "predict")) {
      mode = a;  // (a config file of one of these names: write ./predict)
    } else if (o.config.empty()) {
      o.config = a;
    } else {
      throw InvalidArgument("more than one config file given ('" + o.config + "' and '" + a + "')");
    }
  }
  if (o.config.empty() && !o.help) throw InvalidArgument("no config file given");
  return o;
}

}  // namespace
}  // namespace tessera::run

int main(int argc, char** argv) {
  using namespace tessera;
  using namespace tessera::run;

  // Everything up to MPI_Init is local and deterministic: the same arguments and file
  // give every rank the same verdict.
  Options opts;
  std::int64_t kill_during_save = -1;
  std::vector<int> stop_signals{SIGTERM, SIGUSR1};
  std::string mode;
  std::optional<RunConfig> cfg;
  std::string error;
  int error_status = 0;
  try {
    opts = parse_args(argc, argv, kill_during_save, stop_signals, mode);
    if (!mode.empty() && mode != "train" && opts.dry_run) throw InvalidArgument("--dry-run is for training only");
    if (mode != "predict" && opts.force) throw InvalidArgument("--force is for predict only (it replaces predict.output)");
    if (!opts.help) cfg = parse_run_config(opts.config, opts.overrides);
  } catch (const InvalidArgument& e) {
    error = e.what();
    error_status = kExitUsage;
  } catch (const std::exception& e) {
    error = e.what();
    error_status = kExitError;
  }

  // checkpoint.async saves on a writer thread that communicates while training does:
  // that needs MPI_THREAD_MULTIPLE, asked for only then (some MPI libraries are slower
  // with it). What the library provides is checked when the saver starts (a ConfigError
  // naming the level, on every rank).
  const bool async_checkpoints = cfg && cfg->checkpoint.async && !cfg->checkpoint.dir.empty();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, async_checkpoints ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  // After MPI_Init, so that nothing the MPI library installs replaces them.
  install_stop_signal_handlers(stop_signals);
  set_kill_during_save(kill_during_save);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  if (opts.help) {
    if (rank == 0) std::cout << kUsage;
  } else {
    try {
      // A rank that could not read the file (a node without the file system) would
      // otherwise disagree with the others: agree first, then go on together.
      agree_on_success(MPI_COMM_WORLD, [&] {
        if (error_status == kExitUsage) throw InvalidArgument(error);
        if (error_status != 0) throw ConfigError(error);
      });
      // Before the mesh: its communicators keep the watchdog's counters only when it is on.
      if (cfg->collective_timeout >= 0) set_collective_timeout(cfg->collective_timeout);
      if (mode == "stats") {
        status = field_stats(*cfg, opts);
      } else if (mode == "predict") {
        status = cfg->model_type == "onnx" ? predict_onnx_model(*cfg, opts) : predict_field_emulator(*cfg, opts);
      } else if (cfg->model_type == "decoder") {
        status = train_decoder(*cfg, opts);
      } else {
        status = cfg->model_type == "onnx" ? train_onnx_model(*cfg, opts) : train_field_emulator(*cfg, opts);
      }
    } catch (const std::exception& e) {
      status = error_status == kExitUsage ? kExitUsage : kExitError;
      if (rank == 0) {
        // Every rank parsed the same file: rank 0's own message needs no "(on rank ...)".
        std::cerr << "tessera-run: error: " << (error.empty() ? e.what() : error.c_str()) << "\n";
        if (status == kExitUsage) std::cerr << kUsage;
      }
    }
  }
  MPI_Finalize();
  return status;
}
