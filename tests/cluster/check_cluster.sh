#!/usr/bin/env bash
# The cluster checks (CTest label `cluster`, docs/cluster.md), against the namespace
# cluster of scripts/cluster-local. Without one that answers, every check prints
# "SKIPPED: <reason>" and exits 77, which CTest reports as skipped.
#
#   check_cluster.sh suite BINARY NODES      BINARY (an MPI gtest suite) at 4 ranks spread
#                                            evenly over NODES nodes with srun, after
#                                            checking that the ranks do land on NODES hosts
#   check_cluster.sh resume SOURCE_DIR BUILD_DIR WORK_DIR MPIEXEC
#                                            tessera-run on 2 nodes killed in the middle of
#                                            a save, resumed on 4 nodes: bit-identical to an
#                                            uninterrupted run on the host
#   check_cluster.sh node_loss SOURCE_DIR BUILD_DIR WORK_DIR
#                                            every tessera-run process of node 2 killed
#                                            mid-run (srun told not to end the step): the
#                                            ranks on the other node end by themselves
#                                            within the collective timeout, naming a lost
#                                            rank, and `latest` stays a valid checkpoint
#   check_cluster.sh node_stop SOURCE_DIR BUILD_DIR WORK_DIR
#                                            every tessera-run process of node 2 stopped
#                                            (SIGSTOP) mid-run: the ranks on node 1 end by
#                                            themselves within the collective timeout,
#                                            naming a rank, and `latest` stays valid
#   check_cluster.sh link_cut SOURCE_DIR BUILD_DIR WORK_DIR
#                                            node 2's link taken down mid-run (its ranks
#                                            alive but unreachable): every rank ends within
#                                            the collective timeout (20 s here) with
#                                            tessera's message, none hangs
set -euo pipefail

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }

: "${SLURM_CONF:=${TESSERA_CLUSTER_DIR:-/tmp/tessera-cluster-local}/slurm.conf}"
export SLURM_CONF
# UCX's transports (docs/cluster.md): the fault checks set UCX_TLS=tcp,self,posix,sysv so
# that every byte between nodes crosses the links they cut or silence; the suites and the
# resume check run with UCX's defaults, since with TCP alone between single-rank nodes
# MPICH 4.0.2's MPI_Finalize hung (the resumed 4-node run: 2 of 3 tries, and the host
# reference run once in CI), and they check results, not the links' bandwidth.
unset UCX_TLS
command -v srun >/dev/null 2>&1 || skip "Slurm is not installed (scripts/cluster-local up installs it)"
[[ -f $SLURM_CONF ]] || skip "no cluster up: $SLURM_CONF does not exist (scripts/cluster-local up)"
grep -q '^ClusterName=tessera-cluster' "$SLURM_CONF" || skip "$SLURM_CONF is not a scripts/cluster-local cluster"
nodes_up=$(timeout 15 sinfo -h -N -t idle,alloc,mix -o %N 2>/dev/null | sort -u | wc -l) || true

# spread NODES: srun options for 4 ranks over NODES nodes, the same count on each.
spread() {
  local nodes=$1
  ((nodes_up >= nodes)) || skip "the cluster has $nodes_up usable nodes, this check needs $nodes"
  echo "-N $nodes -n 4 --ntasks-per-node=$((4 / nodes)) --mpi=pmi2 --time=00:05:00"
}

# runs_on NAMESPACE: the pids of the tessera-run processes in that node's namespace.
runs_on() {
  local pid
  for pid in $(ip netns pids "$1"); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tessera-run ]] && echo "$pid"
  done
  return 0
}

case ${1:-} in
suite)
  binary=$2 nodes=$3
  opts=$(spread "$nodes")
  # shellcheck disable=SC2086
  hosts=$(timeout 60 srun $opts hostname | sort -u | wc -l)
  ((hosts == nodes)) || fail "srun $opts ran on $hosts hosts, not $nodes"
  # shellcheck disable=SC2086
  timeout 240 srun $opts "$binary" || fail "srun $opts $binary"
  echo "$(basename "$binary"): passed on $nodes nodes, $((4 / nodes)) ranks each"
  ;;
resume)
  src=$2 build=$3 work=$4 mpiexec=$5
  run=$build/bin/tessera-run ckpt=$build/bin/tessera-ckpt
  tiny=tests/driver/tiny.yaml data="--set=data.path=$src/data/rossby_haurwitz.h5"
  two=$(spread 2) four=$(spread 4)
  rm -rf "$work" && mkdir -p "$work" && cd "$src"
  "$mpiexec" -n 4 "$run" $tiny "$data" "--set=checkpoint.dir=$work/reference" > "$work/reference.log" 2>&1 ||
    fail "the uninterrupted run: $(cat "$work/reference.log")"
  # Killed (SIGKILL on every rank) in the middle of the step-6 save, on 2 nodes.
  # shellcheck disable=SC2086
  if timeout 120 srun $two "$run" $tiny "$data" "--set=checkpoint.dir=$work/ckpt" --kill-during-save 6 \
      > "$work/killed.log" 2>&1; then
    fail "the run killed during its step-6 save exited 0: $(cat "$work/killed.log")"
  fi
  # Resumed on 4 nodes, one rank each: from step 3 (the step-6 save never committed).
  # shellcheck disable=SC2086
  timeout 120 srun $four "$run" $tiny "$data" "--set=checkpoint.dir=$work/ckpt" --set resume=latest_or_start \
    > "$work/resumed.log" 2>&1 ||
    fail "the resumed run: $(cat "$work/resumed.log")"
  grep -q 'resumed from .*step_00000003.* at step 3' "$work/resumed.log" || fail "the resumed run did not resume from step 3: $(cat "$work/resumed.log")"
  out=$("$ckpt" diff "$work/reference/step_00000008" "$work/ckpt/step_00000008" 2>&1) || true
  [[ $out == *"diff: identical"* ]] || fail "tessera-ckpt diff: $out"
  echo "killed on 2 nodes, resumed on 4: step 8 identical to the uninterrupted run"
  ;;
node_loss | node_stop | link_cut)
  mode=$1 src=$2 build=$3 work=$4
  export UCX_TLS=tcp,self,posix,sysv  # across the links this check cuts or silences
  run=$build/bin/tessera-run ckpt=$build/bin/tessera-ckpt
  two=$(spread 2)
  rm -rf "$work" && mkdir -p "$work" && cd "$src"
  # --kill-on-bad-exit=0: Slurm leaves the surviving tasks alone, so ending is tessera's job.
  # shellcheck disable=SC2086
  timeout 200 srun $two --kill-on-bad-exit=0 "$run" tests/driver/tiny.yaml "--set=data.path=$src/data/rossby_haurwitz.h5" \
    "--set=checkpoint.dir=$work/ckpt" --set schedule.steps=400 --set checkpoint.interval=2 --set collective_timeout=20 \
    > "$work/run.log" 2>&1 &
  job=$!
  for ((i = 0; i < 240; ++i)); do
    grep -q '^checkpoint: .*step_00000004' "$work/run.log" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || fail "the run ended before its step-4 checkpoint: $(cat "$work/run.log")"
    sleep 0.5
  done
  if [[ $mode == link_cut ]]; then
    hit_at=$SECONDS
    ip link set tsveth2 down
  else
    mapfile -t victims < <(runs_on tessera-node2)
    ((${#victims[@]} > 0)) || fail "no tessera-run process found on node2"
    hit_at=$SECONDS
    [[ $mode == node_loss ]] && kill -KILL "${victims[@]}"
    [[ $mode == node_stop ]] && kill -STOP "${victims[@]}"
  fi
  if [[ $mode == node_stop ]]; then
    # The stopped ranks never exit, so srun cannot: the survivors on node1 must end by
    # themselves; then the stopped ones are killed so that the step ends.
    for ((i = 0; i < 240; ++i)); do
      [[ -z $(runs_on tessera-node1) ]] && break
      sleep 0.5
    done
    took=$((SECONDS - hit_at))
    kill -KILL "${victims[@]}" 2>/dev/null || true
    status=0
    wait "$job" || status=$?
  else
    status=0
    wait "$job" || status=$?
    took=$((SECONDS - hit_at))
  fi
  [[ $mode == link_cut ]] && ip link set tsveth2 up
  ((status != 0 && status != 124)) || fail "after the $mode the job exited $status (124: it hung until the timeout): $(tail -20 "$work/run.log")"
  ((took <= 60)) || fail "after the $mode the ranks took ${took} s to end"
  grep -Eqi 'rank [0-9]|lost|abort|peer|timed out|timeout' "$work/run.log" || fail "no message names what was lost: $(tail -20 "$work/run.log")"
  "$ckpt" verify "$work/ckpt" > "$work/verify.log" 2>&1 || fail "latest is not a valid checkpoint: $(cat "$work/verify.log")"
  echo "$mode: the job ended in ${took} s (exit $status), latest verified"
  grep -Ei 'rank [0-9]|lost|abort|peer|timed out|timeout' "$work/run.log" | head -3
  ;;
*) echo "usage: check_cluster.sh suite BINARY NODES | resume SRC BUILD WORK MPIEXEC | node_loss|node_stop|link_cut SRC BUILD WORK" >&2; exit 2 ;;
esac
