#!/usr/bin/env bash
# tessera-run's stop signals without Slurm (docs/driver.md, "Signals: preemption and
# requeue"): with --stop-signals USR2, a SIGUSR2 sent twice in quick succession to every
# rank (the second while the ranks agree on the step or save) stops the run after one
# agreed step with one checkpoint that verifies, exit status 75; the run resumed from it
# ends with weights identical to an uninterrupted run's. An unknown name is a usage error.
#
#
#   check_signals.sh SOURCE_DIR BUILD_DIR WORK_DIR MPIEXEC [--set=checkpoint.async=true]
#
# With checkpoint.async the stop step's save runs in the background: the run must wait
# for it (flush) before it reports the checkpoint and exits 75.
set -euo pipefail
src=$1 build=$2 work=$3 mpiexec=$4
extra=("${@:5}")
run=$build/bin/tessera-run
ckpt=$build/bin/tessera-ckpt
fail() { echo "FAILED: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cd "$src"
args=(tests/driver/tiny.yaml "--set=data.path=$src/data/rossby_haurwitz.h5" "--set=parallelism={data: none, domain: 2}" --set=schedule.steps=400
      --set=checkpoint.interval=100 --set=schedule.log_every=100 "${extra[@]}")

# An unknown signal name: status 2 and the name in the message, before MPI starts work.
set +e
"$mpiexec" -n 2 "$run" "${args[@]}" --stop-signals=TERM,BOGUS > "$work/usage.log" 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "--stop-signals=TERM,BOGUS: status $rc, expected 2: $(cat "$work/usage.log")"
grep -q "unknown signal 'BOGUS'" "$work/usage.log" || fail "no message naming BOGUS: $(cat "$work/usage.log")"

"$mpiexec" -n 2 "$run" "${args[@]}" "--set=checkpoint.dir=$work/reference" > "$work/reference.log" 2>&1 ||
  fail "the uninterrupted run: $(cat "$work/reference.log")"

"$mpiexec" -n 2 "$run" "${args[@]}" "--set=checkpoint.dir=$work/ckpt" --stop-signals USR2 > "$work/run.log" 2>&1 &
launcher=$!
for ((i = 0; i < 600; ++i)); do
  grep -q '^training: steps 1\.\.' "$work/run.log" 2>/dev/null && break
  sleep 0.1
done
sleep 0.3
pids=$(pgrep -f -- "checkpoint.dir=$work/ckpt --stop-signals USR2" | grep -v "^$launcher$" || true)
[[ -n $pids ]] || fail "no tessera-run process found"
# Twice, back to back: the second arrives while the first is being acted on.
kill -USR2 $pids 2>/dev/null || true
kill -USR2 $pids 2>/dev/null || true
set +e
wait "$launcher"
rc=$?
set -e
cat "$work/run.log"
[[ $rc == 75 ]] || fail "the signalled run exited $rc, expected 75"
grep -Eq '^signal: SIGUSR2 received; stopping after step [0-9]+ of 400' "$work/run.log" || fail "no stop line"
stop=$(sed -n 's/^signal: SIGUSR2 received; stopping after step \([0-9]*\) of 400/\1/p' "$work/run.log")
((stop < 400)) || fail "not stopped before the end (step $stop)"
[[ $(grep -c '^signal: SIGUSR2 received' "$work/run.log") == 1 ]] || fail "the second signal was reported again"
if [[ " ${extra[*]} " == *"checkpoint.async=true"* ]]; then
  # The stop step's background save was waited for before the exit, and only then reported.
  grep -Eq "^checkpoint: waited [0-9.]+ ms for the background save of .*step_0*${stop}( |$)" "$work/run.log" ||
    fail "the stop step's background save was not waited for"
  grep -Eq "^signal: stopped at step ${stop} with checkpoint .*step_0*${stop};" "$work/run.log" ||
    fail "the stop line does not name the flushed checkpoint"
fi
step_dir=$(printf '%s/ckpt/step_%08d' "$work" "$stop")
[[ -d $step_dir ]] || fail "no checkpoint $step_dir"
"$ckpt" verify "$step_dir" > "$work/verify.log" 2>&1 || fail "verify: $(cat "$work/verify.log")"
! ls -a "$work/ckpt" | grep -q '^\.step_.*\.tmp-' || fail "an unfinished save was left: $(ls -a "$work/ckpt")"

"$mpiexec" -n 2 "$run" "${args[@]}" "--set=checkpoint.dir=$work/ckpt" --set=resume=latest > "$work/resume.log" 2>&1 ||
  fail "the resumed run: $(cat "$work/resume.log")"
grep -Eq "resumed from .*step_0*${stop}/.* at step ${stop} " "$work/resume.log" || fail "not resumed at $stop: $(cat "$work/resume.log")"
out=$("$ckpt" diff "$work/reference/step_00000400" "$work/ckpt/step_00000400" 2>&1) || true
[[ $out == *"diff: identical"* ]] || fail "the resumed run differs from the uninterrupted one: $out"
echo "PASSED: stopped by SIGUSR2 (sent twice) after step $stop, checkpoint verified, resumed, identical"
