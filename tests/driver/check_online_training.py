#!/usr/bin/env python3
"""examples/fortran/online_training.f90 at NP ranks (layout dp:tp:domain) against
tessera-run and against itself:

1. restart: `first` (steps 1..nfirst, then the code's restart and tessera_trainer_save)
   followed by `second` (restore, steps nfirst+1..ntrain, inference) gives the losses and
   the final prediction of `full` bit for bit;
2. tessera-run, given the same config file (its data keys name the states `full` wrote),
   logs the same loss curve: relative difference at most 1e-6 at every step (measured and
   printed; the same step code on the same samples in the same order);
3. at NP > 1, the losses of a 1-rank run of the same config (layout 1:1:1) agree to a
   relative 1e-5 (float reductions in another order).

Usage: check_online_training.py MPIEXEC EXAMPLE TESSERA_RUN WORK NP LAYOUT
"""
import json
import os
import shutil
import subprocess
import sys

NTRAIN, NINFER, NFIRST = 12, 4, 6


def model_and_optimizer(layout):
    """The YAML both online-training checks share: the layout "dp:tp:domain", a small field
    emulator and its optimizer (the caller appends further optimizer keys, then the rest)."""
    dp, tp, domain = (int(v) for v in layout.split(":"))
    return f"""parallelism:
  data: {"ddp" if dp > 1 else "none"}
  tensor: {tp}
  domain: {domain}
model:
  width: 8
  mlp_hidden: 8
  blocks: 1
  kernel: 3
optimizer:
  type: adamw
  lr: 0.005
  clip_grad_norm: 1.0
  warmup_steps: 2
"""


def config(work, layout, data_dir):
    text = model_and_optimizer(layout) + f"""schedule:
  steps: {NTRAIN}
  seed: 11
  log_every: 1
data:
  path: {data_dir}/states/step_00000000/checkpoint.h5
  dataset: model/states
  normalize: false
  shuffle: false
  batch_size: 1
  lead: 1
logging:
  metrics_file: {work}/metrics.jsonl
"""
    path = os.path.join(work, "online.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=500)
    print(done.stdout, flush=True)
    if done.returncode != 0:
        sys.exit(f"FAILED: exit status {done.returncode}")


def losses(path):
    with open(path) as f:
        return [(int(a), float(b)) for a, b in (line.split() for line in f if line.strip())]


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    mpiexec, example, tessera_run, work, np, layout = sys.argv[1:7]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = config(work, layout, work)
    launch = [mpiexec, "-n", np]
    for mode in ("full", "first", "second"):
        run(launch + [example, cfg, work, mode, str(NTRAIN), str(NINFER), str(NFIRST)])

    full = losses(os.path.join(work, "losses_full.txt"))
    first = losses(os.path.join(work, "losses_first.txt"))
    second = losses(os.path.join(work, "losses_second.txt"))
    assert [s for s, _ in full] == list(range(1, NTRAIN + 1)), full
    if first + second != full:
        sys.exit(f"FAILED: first + second {first + second} differ from full {full}")
    with open(os.path.join(work, "prediction_full.bin"), "rb") as a, \
            open(os.path.join(work, "prediction_second.bin"), "rb") as b:
        if a.read() != b.read():
            sys.exit("FAILED: the prediction after the restart differs from the uninterrupted run's")
    print(f"restart at step {NFIRST}: losses and prediction bit-identical")
    if not full[-1][1] < full[0][1]:
        sys.exit(f"FAILED: the loss did not fall ({full[0][1]} -> {full[-1][1]})")

    run(launch + [tessera_run, cfg])
    with open(os.path.join(work, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    driver = [(r["step"], r["loss"]) for r in records if r.get("type", r.get("record")) == "train"]
    if [s for s, _ in driver] != [s for s, _ in full]:
        sys.exit(f"FAILED: tessera-run logged steps {[s for s, _ in driver]}")
    worst = max(relative(a, b) for (_, a), (_, b) in zip(full, driver))
    print(f"tessera-run on the same data: loss curves agree to a relative {worst:.3e} (tolerance 1e-6)")
    if worst > 1e-6:
        for (s, a), (_, b) in zip(full, driver):
            print(f"  step {s}: online {a:.17e}  tessera-run {b:.17e}")
        sys.exit("FAILED: tessera-run's loss curve differs")

    if np != "1":
        serial = os.path.join(work, "serial")
        os.makedirs(serial)
        scfg = config(serial, "1:1:1", serial)
        run([mpiexec, "-n", "1", example, scfg, serial, "full", str(NTRAIN), str(NINFER), str(NFIRST)])
        one = losses(os.path.join(serial, "losses_full.txt"))
        worst = max(relative(a, b) for (_, a), (_, b) in zip(full, one))
        print(f"{np} ranks ({layout}) against 1 rank: loss curves agree to a relative {worst:.3e} (tolerance 1e-5)")
        if worst > 1e-5:
            sys.exit("FAILED: the parallel loss curve differs from the serial one")
    print("PASSED")


if __name__ == "__main__":
    main()
