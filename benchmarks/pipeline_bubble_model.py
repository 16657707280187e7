#!/usr/bin/env python3
"""The pipeline bubble with message costs: what bench_pipeline should measure.

    benchmarks/pipeline_bubble_model.py [--stages 2] [--microbatches 8,16]
        [--forward-ms 5] [--backward-ms 10] [--latency-ms 0.2] [--receive-ms 0.2]
    [--imbalance 0]

The schedules' theory, (p - 1) / (m + p - 1), takes messages as free. This replays each
stage's actions in the order src/pp/schedule.cpp gives them (GPipe: every forward, then
the backwards from the last microbatch; 1F1B: p - s warm-up forwards on every stage but
the last, none there, then one forward and one backward; --warmup pipedream for
PipeDream-flush's p - 1 - s) with two costs per stage-boundary message:

  latency  from the end of the action that sends it to the moment it can be received;
  receive  time the receiving stage spends taking it in (with MPICH's UCX device on one
           node, the receiver copies a large message out of the sender's memory inside its
           own MPI call: that copy is work on the receiving core, not waiting).

and, with --imbalance x, stages of unequal speed: stage s's forwards and backwards take
(1 + x s / (p - 1)) times the given ones (the last stage x slower; x < 0: faster).

and prints the two figures bench_pipeline measures (and, as 1f1b-pd, 1F1B's bubble with
PipeDream-flush's warm-up): the bubble, 1 - (the busiest stage's
compute time) / (the step's time), and the idle fraction, the same averaged over the
stages (with unequal stages the faster ones also wait for the slowest in the steady
state). With latency = receive = 0 and equal stages both equal the theory; with unequal
stages (--imbalance) the bubble stays at or below it, since the theory's idle time is the
other stages' work on one microbatch, while the idle fraction adds the faster stages'
waiting. --check asserts these for p = 1..5, m = 1..24, and that costs never lower the
bubble; ctest runs it as pipeline_bubble_model. docs/pipeline.md compares it with measured runs.
"""

import argparse


def stage_actions(schedule, stage, stages, microbatches, pipedream=False):
    """The (kind, microbatch) list of one stage, as pp::stage_actions builds it (or, with
    pipedream, with PipeDream-flush's one warm-up forward fewer)."""
    if schedule == "gpipe":
        return [("F", j) for j in range(microbatches)] + [("B", j) for j in reversed(range(microbatches))]
    if pipedream:
        warmup = min(stages - 1 - stage, microbatches)
    else:
        warmup = 0 if stage == stages - 1 else min(stages - stage, microbatches)
    actions = [("F", j) for j in range(warmup)]
    forward, backward = warmup, 0
    while forward < microbatches:
        actions += [("F", forward), ("B", backward)]
        forward, backward = forward + 1, backward + 1
    actions += [("B", j) for j in range(backward, microbatches)]
    return actions


def bubble(schedule, stages, microbatches, forward, backward, latency, receive, imbalance=0.0, pipedream=False):
    """bench_pipeline's (bubble, idle) of one step under the costs above (times in any unit)."""
    actions = [stage_actions(schedule, s, stages, microbatches, pipedream) for s in range(stages)]
    finished = {}  # (stage, kind, microbatch) -> end time
    clock = [0.0] * stages
    busy = [0.0] * stages
    position = [0] * stages
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while position[s] < len(actions[s]):
                kind, j = actions[s][position[s]]
                # A forward needs the previous stage's forward of j; a backward the next
                # stage's backward of j (the last stage: its own forward, no message).
                source = (s - 1, "F", j) if kind == "F" else (s + 1, "B", j)
                remote = 0 <= source[0] < stages
                if remote and source not in finished:
                    break
                ready = finished[source] + latency if remote else 0.0
                speed = 1.0 + imbalance * s / (stages - 1) if stages > 1 else 1.0
                work = (forward if kind == "F" else backward) * speed
                clock[s] = max(clock[s], ready) + (receive if remote else 0.0) + work
                busy[s] += work
                finished[(s, kind, j)] = clock[s]
                position[s] += 1
                moved = True
    if any(position[s] < len(actions[s]) for s in range(stages)):
        raise RuntimeError("the schedule deadlocked")  # cannot happen for GPipe or 1F1B
    step = max(clock)
    return 1.0 - max(busy) / step, sum(1.0 - b / step for b in busy) / stages


def check():
    """Free messages give the theory; costly ones never give less; unequal stages leave the
    bubble at or below the theory."""
    for p in range(1, 6):
        for m in range(1, 25):
            theory = (p - 1) / (m + p - 1)
            for schedule, pipedream in (("gpipe", False), ("1f1b", False), ("1f1b", True)):
                name = schedule + (" (PipeDream-flush warm-up)" if pipedream else "")
                free = bubble(schedule, p, m, 5.0, 10.0, 0.0, 0.0, 0.0, pipedream)
                costly = bubble(schedule, p, m, 5.0, 10.0, 0.2, 0.2, 0.0, pipedream)
                if max(abs(f - theory) for f in free) > 1e-12 or costly[0] < free[0] - 1e-12:
                    raise SystemExit(f"{name} p={p} m={m}: theory {theory}, free {free}, costly {costly}")
                for x in (0.1, -0.1):
                    b = bubble(schedule, p, m, 5.0, 10.0, 0.0, 0.0, x, pipedream)[0]
                    if b > theory + 1e-12:
                        raise SystemExit(f"{name} p={p} m={m} imbalance {x}: theory {theory}, bubble {b}")
            # The extra warm-up forward never costs time, and takes the messages' round trip
            # off 1F1B's steady state.
            ours = bubble("1f1b", p, m, 5.0, 10.0, 0.2, 0.2)[0]
            pipedream = bubble("1f1b", p, m, 5.0, 10.0, 0.2, 0.2, 0.0, True)[0]
            if ours > pipedream + 1e-12:
                raise SystemExit(f"1f1b p={p} m={m}: {ours} with p - s warm-ups, {pipedream} with p - 1 - s")
    print("pipeline_bubble_model: free messages give the theory at p = 1..5, m = 1..24; "
          "unequal stages keep the bubble at or below it; 1F1B's extra warm-up never raises it")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--microbatches", default="", help="comma-separated; default p, 2p, 4p, 8p")
    parser.add_argument("--forward-ms", type=float, default=5.0)
    parser.add_argument("--backward-ms", type=float, default=10.0)
    parser.add_argument("--latency-ms", type=float, default=0.2)
    parser.add_argument("--receive-ms", type=float, default=0.2)
    parser.add_argument("--imbalance", type=float, default=0.0)
    parser.add_argument("--check", action="store_true", help="check the model against the theory and exit")
    args = parser.parse_args()
    if args.check:
        return check()
    p = args.stages
    counts = [int(m) for m in args.microbatches.split(",")] if args.microbatches else [p, 2 * p, 4 * p, 8 * p]
    print(f"p = {p}, forward {args.forward_ms} ms, backward {args.backward_ms} ms, "
          f"message latency {args.latency_ms} ms, receive {args.receive_ms} ms, imbalance {args.imbalance}")
    print(f"{'m':>4} {'theory':>8} {'gpipe':>8} {'(idle)':>8} {'1f1b':>8} {'(idle)':>8} {'1f1b-pd':>8}")
    for m in counts:
        costs = (args.forward_ms, args.backward_ms, args.latency_ms, args.receive_ms, args.imbalance)
        gpipe, one_f_one_b = bubble("gpipe", p, m, *costs), bubble("1f1b", p, m, *costs)
        pipedream = bubble("1f1b", p, m, *costs, True)
        print(f"{m:>4} {(p - 1) / (m + p - 1):8.3f} {gpipe[0]:8.3f} {gpipe[1]:8.3f} "
              f"{one_f_one_b[0]:8.3f} {one_f_one_b[1]:8.3f} {pipedream[0]:8.3f}")


if __name__ == "__main__":
    main()
