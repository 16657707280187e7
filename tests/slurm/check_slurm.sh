#!/usr/bin/env bash
# The Slurm checks (CTest label `slurm`, docs/driver.md "Slurm"), run against the
# single-node cluster of scripts/slurm-local. Without a cluster that answers, every check
# prints "SKIPPED: <reason>" and exits 77, which CTest reports as skipped.
#
#   check_slurm.sh MODE SOURCE_DIR BUILD_DIR WORK_DIR MPIEXEC
#
# MODE: srun | sbatch_cpu | sbatch_cpu_default_mpi | sbatch_gpu | sbatch_gpu_default_mpi |
#       preempt_term | preempt_usr1 | kill_during_save | bench_sweep
# BUILD_DIR holds bin/tessera-run and bin/tessera-ckpt (what the sbatch scripts call
# BUILD_DIR). Everything is written under WORK_DIR; tessera-run runs in SOURCE_DIR.
set -euo pipefail
mode=$1 src=$2 build=$3 work=$4 mpiexec=$5
run=$build/bin/tessera-run
ckpt=$build/bin/tessera-ckpt
tiny=tests/driver/tiny.yaml
data="--set=data.path=$src/data/rossby_haurwitz.h5"

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }

# ---- is a cluster up?
: "${SLURM_CONF:=${TESSERA_SLURM_DIR:-/tmp/tessera-slurm-local}/slurm.conf}"
export SLURM_CONF
command -v sbatch >/dev/null 2>&1 || skip "Slurm is not installed (scripts/slurm-local start installs and starts it)"
[[ -f $SLURM_CONF ]] || skip "no Slurm cluster up: $SLURM_CONF does not exist (start one with scripts/slurm-local start)"
state=$(timeout 15 sinfo -h -o %t 2>/dev/null | head -1) || true
[[ $state == @(idle|mix|alloc|comp*) ]] ||
  skip "the Slurm cluster of $SLURM_CONF does not answer or has no usable node (sinfo: '${state}'); scripts/slurm-local start"

rm -rf "$work"
mkdir -p "$work"
cd "$src"

# The options that fit a script written for 2 nodes and many cores onto this one node.
one_node=(--nodes=1 --ntasks=4 --ntasks-per-node=4 --cpus-per-task=1 --overcommit --time=00:10:00)

# job_field ID FIELD: a field of `scontrol show job` (empty when unknown).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# wait_job ID RESTARTS: until the job has ended after at least RESTARTS requeues; prints
# its state. Fails after 120 s.
wait_job() {
  local id=$1 restarts=$2 st r
  for ((i = 0; i < 240; ++i)); do
    st=$(job_field "$id" JobState)
    r=$(job_field "$id" Restarts)
    if [[ $st == @(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) ]] &&
       ((${r:-0} >= restarts)); then
      echo "$st"
      return 0
    fi
    sleep 0.5
  done
  scancel "$id" 2>/dev/null || true
  fail "job $id did not end within 120 s (state $st, restarts $r)"
}

# wait_for_line FILE REGEX: until FILE holds a line matching REGEX (60 s).
wait_for_line() {
  for ((i = 0; i < 600; ++i)); do
    [[ -f $1 ]] && grep -Eq "$2" "$1" && return 0
    sleep 0.1
  done
  fail "no line matching '$2' in $1 after 60 s:$(cat "$1" 2>/dev/null)"
}

expect_in() {  # expect_in FILE REGEX WHAT
  grep -Eq "$2" "$1" || fail "$3: no line matching '$2' in $1:
$(cat "$1")"
}

identical() {  # identical A B
  local out
  out=$("$ckpt" diff "$1" "$2" 2>&1) || true
  [[ $out == *"diff: identical"* ]] || fail "tessera-ckpt diff $1 $2:
$out"
  echo "tessera-ckpt diff $1 $2: identical"
}

export BUILD_DIR=$build

case $mode in
srun)
  # srun --mpi=pmi2 -n 4 gives what mpiexec -n 4 gives: the same final loss line and
  # bit-identical final weights.
  "$mpiexec" -n 4 "$run" $tiny "$data" "--set=checkpoint.dir=$work/mpiexec" > "$work/mpiexec.log" 2>&1 ||
    fail "mpiexec -n 4 tessera-run: $(cat "$work/mpiexec.log")"
  timeout 120 srun --mpi=pmi2 -n 4 --overcommit --time=00:05:00 "$run" $tiny "$data" "--set=checkpoint.dir=$work/srun" \
    > "$work/srun.log" 2>&1 || fail "srun -n 4 tessera-run: $(cat "$work/srun.log")"
  a=$(grep '^summary: final loss' "$work/mpiexec.log") || fail "no final loss line from mpiexec"
  b=$(grep '^summary: final loss' "$work/srun.log") || fail "no final loss line from srun: $(cat "$work/srun.log")"
  echo "mpiexec: $a"
  echo "srun:    $b"
  [[ $a == "$b" ]] || fail "the final loss lines differ"
  identical "$work/mpiexec/step_00000008" "$work/srun/step_00000008"
  ;;

sbatch_cpu | sbatch_cpu_default_mpi | sbatch_gpu | sbatch_gpu_default_mpi)
  script=examples/slurm/${mode#sbatch_}.sbatch
  script=${script//_/-}
  extra=()
  if [[ $mode == sbatch_gpu* ]]; then
    # The CPU fallback form: this cluster has no GPUs (no GRES), so a copy without the
    # --gpus-per-task line, on the host device; everything else is the script's own.
    grep -q '^#SBATCH --gpus-per-task=1' "$script" || fail "$script does not ask for one GPU per task"
    sed 's/^#SBATCH --gpus/# (removed for the CPU test) --gpus/' "$script" > "$work/$(basename "$script")"
    script=$work/$(basename "$script")
    export TESSERA_DEVICE=host
  fi
  export TESSERA_RUN_ARGS="$data" TESSERA_CHECKPOINT_DIR=$work/ckpt
  timeout 150 sbatch --wait "${one_node[@]}" --chdir="$src" --output="$work/job-%j.out" "$script" $tiny \
    > "$work/sbatch.log" 2>&1 || fail "sbatch --wait $script: $(cat "$work/sbatch.log" "$work"/job-*.out 2>/dev/null)"
  out=$(ls "$work"/job-*.out)
  cat "$out"
  expect_in "$out" '^summary: final loss' "$script"
  expect_in "$out" 'tessera-run exited with status 0' "$script"
  expect_in "$out" 'checkpoint: .*/step_00000008' "$script"
  [[ $mode == sbatch_cpu_default_mpi ]] && expect_in "$out" 'memory plan' "$script (--dry-run)"
  [[ $mode == sbatch_gpu* ]] && expect_in "$out" 'device host' "$script (CPU fallback)"
  [[ -d $work/ckpt/step_00000008 ]] || fail "no final checkpoint in $work/ckpt"
  ;;

preempt_term | preempt_usr1)
  # A job stopped by a signal writes a checkpoint at the step it stopped, exits 75, the
  # script requeues it, the requeued job resumes there, and the final weights equal an
  # uninterrupted run's bit for bit.
  long=("$data" --set=schedule.steps=200 --set=checkpoint.interval=50 --set=schedule.log_every=50)
  "$mpiexec" -n 4 "$run" $tiny "${long[@]}" "--set=checkpoint.dir=$work/reference" > "$work/reference.log" 2>&1 ||
    fail "the uninterrupted run: $(cat "$work/reference.log")"
  export TESSERA_RUN_ARGS="${long[*]}" TESSERA_CHECKPOINT_DIR=$work/ckpt
  id=$(sbatch --parsable "${one_node[@]}" --chdir="$src" --output="$work/job.out" examples/slurm/cpu.sbatch $tiny)
  id=${id%%;*}
  wait_for_line "$work/job.out" '^training: steps 1\.\.'
  sleep 0.5
  if [[ $mode == preempt_term ]]; then
    # What a preemption sends the ranks: SIGTERM to every task of the job's steps. (Not
    # --full: srun in the batch shell would get it too, and srun kills its step at once.)
    scancel --signal=TERM "$id"
    sig=SIGTERM
  else
    # What --signal=B:USR1@N sends before the time limit: SIGUSR1 to the batch shell only
    # (the script passes it on to srun, which passes it to the ranks).
    scancel --signal=USR1 --batch "$id"
    sig=SIGUSR1
  fi
  st=$(wait_job "$id" 1)
  cat "$work/job.out"
  [[ $st == COMPLETED ]] || fail "job $id ended $st"
  expect_in "$work/job.out" "^signal: $sig received; stopping after step [0-9]+ of 200" "the signalled run"
  stop=$(sed -n "s/^signal: $sig received; stopping after step \([0-9]*\) of 200/\1/p" "$work/job.out")
  ((stop < 200)) || fail "the job was not stopped before its end (step $stop)"
  expect_in "$work/job.out" "exiting with status 75" "the signalled run"
  expect_in "$work/job.out" "requeueing job $id" "the batch script"
  expect_in "$work/job.out" "restart 1" "the requeued job"
  expect_in "$work/job.out" "resumed from .*step_0*${stop}/.* at step ${stop} " "the requeued job"
  expect_in "$work/job.out" '^summary: final loss' "the requeued job"
  echo "stopped by $sig after step $stop, requeued, resumed at step $stop"
  identical "$work/reference/step_00000200" "$work/ckpt/step_00000200"
  ;;

kill_during_save)
  # SIGKILL on every rank in the middle of the step-6 save: the next job on the same
  # checkpoint.dir ignores the unfinished save, resumes from step 3 and ends
  # bit-identical to an uninterrupted run.
  "$mpiexec" -n 4 "$run" $tiny "$data" "--set=checkpoint.dir=$work/reference" > "$work/reference.log" 2>&1 ||
    fail "the uninterrupted run: $(cat "$work/reference.log")"
  export TESSERA_RUN_ARGS="$data --kill-during-save 6" TESSERA_CHECKPOINT_DIR=$work/ckpt
  id=$(sbatch --parsable "${one_node[@]}" --chdir="$src" --output="$work/job.out" examples/slurm/cpu.sbatch $tiny)
  id=${id%%;*}
  st=$(wait_job "$id" 0)
  [[ $st == FAILED ]] || fail "the killed job ended $st, not FAILED: $(cat "$work/job.out")"
  expect_in "$work/job.out" 'kill-during-save 6: killing every rank during this save' "the killed job"
  ls -a "$work/ckpt"
  ls -a "$work/ckpt" | grep -q '^\.step_00000006\.tmp-' || fail "no unfinished step-6 save left by the kill"
  [[ ! -e $work/ckpt/step_00000006 && $(cat "$work/ckpt/latest") == *step_00000003* ]] ||
    fail "the killed save was committed: $(ls -a "$work/ckpt"; cat "$work/ckpt/latest")"
  # A new job on the same checkpoint.dir (resume: latest_or_start), without the hook (a
  # requeued job would keep the environment of its submission, hook included).
  export TESSERA_RUN_ARGS="$data"
  timeout 150 sbatch --wait "${one_node[@]}" --chdir="$src" --output="$work/job2.out" examples/slurm/cpu.sbatch $tiny \
    > "$work/sbatch.log" 2>&1 || fail "the second job: $(cat "$work/sbatch.log" "$work/job2.out")"
  cat "$work/job.out" "$work/job2.out"
  # The unfinished step-6 save is gone once a newer step is committed (it is kept while
  # it is newer than every committed step: it could be another job's save in progress).
  ! ls -a "$work/ckpt" | grep -q '^\.step_.*\.tmp-' || fail "an unfinished save was left: $(ls -a "$work/ckpt")"
  expect_in "$work/job2.out" 'resumed from .*step_00000003.* at step 3 ' "the second job"
  identical "$work/reference/step_00000008" "$work/ckpt/step_00000008"
  ;;

bench_sweep)
  [[ -x $build/bin/bench_halo ]] || skip "the benchmarks are not built (TESSERA_BUILD_BENCHMARKS=ON)"
  # scripts/bench-sweep --slurm: one salloc allocation, every point an srun step; then
  # scripts/bench-plot turns the JSON into the tables (and charts, with matplotlib).
  timeout 240 scripts/bench-sweep --build "$build" --out "$work/results" --ranks 1,2 --min-time 0.01 --quick \
    --slurm "--time=00:05:00 --overcommit" > "$work/sweep.log" 2>&1 || fail "bench-sweep --slurm: $(cat "$work/sweep.log")"
  cat "$work/sweep.log"
  expect_in "$work/sweep.log" '^bench-sweep: salloc -n 2 ' "bench-sweep --slurm"
  expect_in "$work/sweep.log" 'srun -n 2 --mpi=pmi2 .*bench_halo' "bench-sweep inside the allocation"
  for f in bench_tp_mlp.strong bench_tp_mlp.weak bench_collectives.strong bench_halo.strong bench_halo.weak \
           bench_checkpoint.strong; do
    for n in 1 2; do
      grep -q '"benchmarks"' "$work/results/$f.np$n.json" || fail "no benchmark results in $work/results/$f.np$n.json"
    done
  done
  /usr/bin/python3 scripts/bench-plot --results "$work/results" --out "$work/plots" > "$work/plot.log" 2>&1 ||
    fail "bench-plot: $(cat "$work/plot.log")"
  cat "$work/plot.log"
  expect_in "$work/plots/tables.md" 'halo' "bench-plot's tables"
  expect_in "$work/plots/tables.md" '\| *2 *\|' "bench-plot's tables (the 2-rank column)"
  ;;

*) fail "unknown mode $mode" ;;
esac
echo "PASSED: $mode"
