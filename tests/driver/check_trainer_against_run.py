#!/usr/bin/env python3
"""The C trainer with data.normalize and optimizer.accumulate against tessera-run
(docs/online-training.md): the same config and the same physical states, which
tessera-run reads from an HDF5 file whose attributes give the per-channel mean and std,
and the trainer (trainer_replay) gets as f64 arrays with the same mean and std passed by
the caller, ACCUMULATE micro-batches per optimizer step. Each step's loss (the mean of
its micro-batches') must agree with tessera-run's to a relative 1e-6 (measured and
printed): the same normalisation, the same TrainingStep, the same samples in the same
order.

Usage: check_trainer_against_run.py MPIEXEC REPLAY TESSERA_RUN WORK NP LAYOUT
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np

# The same launcher (echo, 500 s limit, FAILED on a bad exit) and the same model and optimizer.
from check_online_training import model_and_optimizer, run

STEPS, ACCUMULATE, LOCAL_BATCH = 6, 2, 2
CHANNELS, NLAT, NLON = 2, 9, 8
MEAN, SPREAD = np.array([280.0, -3.0]), np.array([15.0, 0.5])  # a temperature in K, a small tendency


def states(times):
    """Physical fields: a wave moving with time, around MEAN with amplitude SPREAD."""
    t, c, i, j = np.meshgrid(np.arange(times), np.arange(CHANNELS), np.arange(NLAT), np.arange(NLON), indexing="ij")
    wave = np.sin(0.7 * (j + t) + 0.3 * c) * np.cos(0.4 * i - 0.2 * t)
    return (MEAN[c] + SPREAD[c] * wave).astype(np.float32)


def main():
    mpiexec, replay, tessera_run, work, np_, layout = sys.argv[1:7]
    dp = int(layout.split(":")[0])  # the ranks that split the samples
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    samples = STEPS * ACCUMULATE * LOCAL_BATCH * dp  # exactly one epoch, no padding
    fields = states(samples + 1)
    # The statistics as tessera-run stats computes them (population std), in double.
    mean = fields.astype(np.float64).mean(axis=(0, 2, 3))
    std = fields.astype(np.float64).std(axis=(0, 2, 3))
    data = os.path.join(work, "states.h5")
    with h5py.File(data, "w") as f:
        d = f.create_dataset("fields", data=fields)
        d.attrs["mean"] = mean
        d.attrs["std"] = std
    fields.tofile(os.path.join(work, "states.bin"))
    stats = os.path.join(work, "stats.txt")
    with open(stats, "w") as f:
        f.write(" ".join(repr(float(v)) for v in list(mean) + list(std)) + "\n")
    cfg = os.path.join(work, "run.yaml")
    with open(cfg, "w") as f:
        f.write(model_and_optimizer(layout) + f"""  accumulate: {ACCUMULATE}
schedule:
  steps: {STEPS}
  seed: 11
  log_every: 1
data:
  path: {data}
  dataset: fields
  normalize: true
  shuffle: false
  batch_size: {LOCAL_BATCH * dp}
  lead: 1
checkpoint:
  dir: {work}/run_ckpt
logging:
  metrics_file: {work}/metrics.jsonl
""")
    launch = [mpiexec, "-n", np_]
    losses = os.path.join(work, "losses.txt")
    run(launch + [replay, cfg, os.path.join(work, "states.bin"), str(samples + 1), str(CHANNELS), str(NLAT), str(NLON),
                  str(STEPS), str(LOCAL_BATCH), stats, losses])
    run(launch + [tessera_run, cfg])
    with open(losses) as f:
        online = [(int(a), float(b)) for a, b in (line.split() for line in f if line.strip())]
    with open(os.path.join(work, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    driver = [(r["step"], r["loss"]) for r in records if r.get("type", r.get("record")) == "train"]
    if [s for s, _ in online] != list(range(1, STEPS + 1)) or [s for s, _ in driver] != [s for s, _ in online]:
        sys.exit(f"FAILED: steps: trainer {[s for s, _ in online]}, tessera-run {[s for s, _ in driver]}")
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(online, driver))
    for (s, a), (_, b) in zip(online, driver):
        print(f"  step {s}: trainer {a:.9e}  tessera-run {b:.9e}")
    print(f"data.normalize, accumulate {ACCUMULATE}, f64 fields at {np_} rank(s), layout {layout}: "
          f"loss curves agree to a relative {worst:.3e} (tolerance 1e-6)")
    if worst > 1e-6:
        sys.exit("FAILED: the trainer's loss curve differs from tessera-run's")
    if not online[-1][1] < online[0][1]:
        sys.exit(f"FAILED: the loss did not fall ({online[0][1]} -> {online[-1][1]})")
    print("PASSED")


if __name__ == "__main__":
    main()
