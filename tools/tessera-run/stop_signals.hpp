#pragma once
// tessera-run's signals: preemption (stop at an agreed step, save, exit kExitRequeue) and
// the --kill-during-save test hook. The training loop reads them at step boundaries.

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::run {

// Preemption (docs/driver.md, "Signals: preemption and requeue"). SIGTERM (what Slurm
// sends on preemption, scancel and at the time limit) and SIGUSR1 (the warning that
// `sbatch --signal=B:USR1@N` sends before the time limit) only set a flag; the training
// loop agrees on it across ranks at every step boundary (one MAX all-reduce of one value
// over the world), so every rank stops after the same step, saves a checkpoint there (when
// checkpoint.dir is set) and returns kExitRequeue. A second signal while saving changes
// nothing (the flag is already set; the save finishes, and is atomic anyway). Installed
// with SA_RESTART, so no system call in MPI or HDF5 sees EINTR. Call once, after MPI_Init.
// The signals of --stop-signals ("TERM,USR1", names with or without SIG); InvalidArgument
// naming an unknown one.
std::vector<int> parse_stop_signals(const std::string& list);
void install_stop_signal_handlers(const std::vector<int>& signals);
// The signal that asked the run to stop (0: none yet). Async-signal-safe to set.
int stop_signal_received();

// The exit status of a run stopped by a signal after saving its checkpoint: 75
// (EX_TEMPFAIL, "try again"). The sbatch scripts in examples/slurm requeue the job on it
// and the requeued job resumes (resume: latest_or_start). A run stopped by a signal with
// no checkpoint.dir exits with 128 + the signal number instead, like a killed process.
inline constexpr int kExitRequeue = 75;

// Test hook (--kill-during-save N): while step N's checkpoint is being written, every
// rank is killed (SIGKILL, from inside its first write past a tiny file-size limit), as a
// job killed in the middle of a save would be. Set before run_training.
void set_kill_during_save(std::int64_t step);

// "SIGTERM", ... for the log lines.
const char* signal_name(int sig);
// --kill-during-save: whether this step's save is the one to be killed in, and the
// arming (a tiny file-size limit and a watcher of `root`) right before that save.
bool kill_during_save_due(std::int64_t step);
void arm_kill_during_save(const std::string& root, std::int64_t step);

}  // namespace tessera::run
