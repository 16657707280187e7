#!/usr/bin/python3
"""tessera-run with model.type: onnx (docs/driver.md, "Your own model: ONNX"); CTest label driver.

    check_onnx_run.py MPIEXEC RUN SOURCE_DIR WORK_DIR MAX_RANKS

A small periodic-longitude CNN (a residual of two convolutions, the longitude wrap written
with torch.cat, zero padding at the poles) is exported by PyTorch's own exporter with a
dynamic batch, then trained by tessera-run on the committed Rossby-Haurwitz data:

- serially, and at 2 ranks data-parallel (ddp) and split over 2 latitude bands (domain),
  and at 4 ranks (ddp 2 x domain 2) when MAX_RANKS is 4: every step's loss and gradient
  norm equal the serial run's within 1e-5 (relative);
- validation (the last fifth held out, every 3 steps; its last batch padded to the
  graph's batch) at domain 2 equals the serial run's within 1e-5;
- killed after the checkpoint of step 3 and resumed (2 ranks, domain 2): steps 4..6 and
  the exported weights equal the uninterrupted run's;
- predict: a 4-step forecast written at 1 rank and at 2 (domain 2) from the serial run's
  checkpoint, the same within 1e-5 of each variable's largest magnitude; its first step
  equals the PyTorch model holding the initializers of model.export (the trained graph),
  run on the normalised initial state and denormalised (1e-5), and those initializers
  differ from the file's initial ones;
- a graph exported with a fixed batch of 4 is refused naming data.batch_size where a
  replica trains on 2, and predict through it (its one sample padded to 4) gives the
  dynamic graph's forecast;
- the netCDF twin of the data (normalised by `tessera-run stats`' statistics of it) trains
  at domain 2 to the HDF5 file's losses and gradient norms (1e-6);
- bad configs: a graph of 3 channels on 2 variables, a missing file, parallelism.tensor 2,
  a graph whose output is smaller than its input, and (--dry-run, domain 2) a softmax
  along latitude, which cannot run split: exit status 1 and one error line naming the key.

Exits 77 (CTest: skipped) without torch, onnx or h5py under /usr/bin/python3.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

try:
    import h5py
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from onnx import numpy_helper
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

MPIEXEC, RUN, SRC, WORK = sys.argv[1:5]
MAX_RANKS = int(sys.argv[5])
H5 = os.path.join(SRC, "data/rossby_haurwitz.h5")
TWIN = os.path.join(SRC, "data/rossby_haurwitz.nc")  # the same fields in netCDF/CF
STEPS = 6


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


class PeriodicResidual(nn.Module):
    """The next state as the input plus two convolutions, periodic in longitude."""

    def __init__(self, channels=3, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3)
        self.conv2 = nn.Conv2d(width, channels, 3)

    @staticmethod
    def pad(x):
        # Not padding_mode="circular": Debian's torch 1.13 exports it wrongly (docs/onnx.md).
        x = torch.cat([x[..., -1:], x, x[..., :1]], dim=-1)
        return F.pad(x, (0, 0, 1, 1))

    def forward(self, x):
        return x + 0.1 * self.conv2(self.pad(torch.tanh(self.conv1(self.pad(x)))))


class SoftmaxOverLatitude(nn.Module):
    """Normalises along latitude: cannot run split over latitude bands."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.conv(torch.softmax(x, dim=2))


class ValidConv(nn.Module):
    """A "valid" convolution: its output is smaller than the field."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)

    def forward(self, x):
        return self.conv(x)


def export_model(path, model_class=None, batch=None):
    warnings.filterwarnings("ignore")  # the exporter's notes on constant folding
    torch.manual_seed(3)
    model = (model_class or PeriodicResidual)().eval()
    x = torch.zeros(batch or 1, 3, 32, 64)
    dynamic = None if batch else {"x": {0: "batch"}, "y": {0: "batch"}}
    torch.onnx.export(model, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes=dynamic, do_constant_folding=True)


def config(name, layout, **extra):
    """A config file for run `name` at `layout` (the parallelism mapping)."""
    text = f"""parallelism: {layout}
model: {{type: onnx, path: {WORK}/model.onnx, export: {WORK}/{name}_trained.onnx}}
data: {{path: {H5}, variables: [h, u, v], batch_size: 4, lead: 1, validation: 0.2}}
optimizer: {{type: adamw, lr: 2.0e-3, clip_grad_norm: 1.0, warmup_steps: 2}}
schedule: {{steps: {STEPS}, log_every: 1, eval_every: 3, seed: 7}}
checkpoint: {{dir: {WORK}/{name}_ckpt, layout: per_rank, interval: 3}}
logging: {{metrics_file: {WORK}/{name}_metrics.jsonl}}
predict: {{initial_time: 100, steps: 4, output: {WORK}/{name}_forecast.nc}}
"""
    path = os.path.join(WORK, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(np_, *args, expect=0):
    cmd = [MPIEXEC, "-n", str(np_), RUN, *args]
    p = subprocess.run(cmd, cwd=WORK, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if p.returncode != expect:
        fail(f"{' '.join(cmd)} exited {p.returncode}, expected {expect}:\n{out}")
    return p


def losses(name, key="loss", record="train"):
    out = {}
    with open(os.path.join(WORK, name + "_metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == record:
                out[r["step"]] = r[key]
    return out


def same_losses(name, reference, steps, tol=1e-5):
    """Every step's loss and gradient norm (AdamW hides a gradient off by a constant
    factor, such as one summed twice over the bands; the norm does not)."""
    worst = 0.0
    for key in ("loss", "grad_norm"):
        got, ref = losses(name, key), losses(reference, key)
        for s in steps:
            if s not in got or s not in ref:
                fail(f"{name}: step {s} missing from the metrics (have {sorted(got)}; {reference}: {sorted(ref)})")
            worst = max(worst, abs(got[s] - ref[s]) / abs(ref[s]))
        if worst > tol:
            fail(f"{name}: {key} {got} differs from {reference}'s {ref} (worst relative {worst:.2e})")
    print(f"{name}: steps {steps[0]}..{steps[-1]}: loss and gradient norm match {reference} (worst relative {worst:.2e})")
    return worst


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def forecast(path):
    with h5py.File(path, "r") as f:
        return np.stack([f[v][...] for v in ("h", "u", "v")], axis=1)  # [time, channel, lat, lon]


def check_training():
    serial = config("serial", "{data: none, tensor: 1, domain: 1}")
    run(1, serial)
    start = losses("serial")
    if not start[STEPS] < start[1]:
        fail(f"serial: the loss did not fall: {start}")
    layouts = [(2, "ddp2", "{data: ddp, tensor: 1, domain: 1}"), (2, "domain2", "{data: none, tensor: 1, domain: 2}")]
    if MAX_RANKS >= 4:
        layouts.append((4, "ddp2_domain2", "{data: ddp, tensor: 1, domain: 2}"))
    for np_, name, layout in layouts:
        run(np_, config(name, layout))
        same_losses(name, "serial", list(range(1, STEPS + 1)))
    # The 23 held-out samples in batches of 4, the last padded to the graph's batch: at
    # domain 2 as serially (dp replicas would drop one sample).
    got, ref = losses("domain2", "val_loss", "validation"), losses("serial", "val_loss", "validation")
    if sorted(got) != [3, 6] or any(abs(got[s] - ref[s]) > 1e-5 * abs(ref[s]) for s in got):
        fail(f"domain2: validation losses {got} differ from the serial run's {ref}")
    print(f"validation: domain 2 equals serial at steps 3 and 6 ({got[6]:.6e})")


def check_resume():
    layout = "{data: none, tensor: 1, domain: 2}"
    cfg = config("resumed", layout)
    p = subprocess.run([MPIEXEC, "-n", "2", RUN, cfg, "--kill-after-step", "3"], cwd=WORK, capture_output=True,
                       text=True)
    if p.returncode == 0:
        fail("--kill-after-step 3 did not kill the run")
    if os.path.exists(os.path.join(WORK, "resumed_trained.onnx")):
        fail("a killed run exported its graph")
    run(2, cfg, "--set", "resume=latest")
    same_losses("resumed", "domain2", [4, 5, 6], tol=0.0)
    a, b = initializers(f"{WORK}/resumed_trained.onnx"), initializers(f"{WORK}/domain2_trained.onnx")
    worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    if worst != 0.0:
        fail(f"the resumed run's exported weights differ from the uninterrupted run's by {worst:.2e}")
    print("resume: steps 4..6 and the exported weights equal the uninterrupted run's")


def check_predict():
    serial = os.path.join(WORK, "serial.yaml")
    run(1, "predict", serial)
    split = config("predict2", "{data: none, tensor: 1, domain: 2}")
    run(2, "predict", split, "--set", f"predict.checkpoint={WORK}/serial_ckpt")
    one, two = forecast(f"{WORK}/serial_forecast.nc"), forecast(f"{WORK}/predict2_forecast.nc")
    if one.shape != (5, 3, 32, 64):
        fail(f"the forecast is {one.shape}, expected (5, 3, 32, 64)")
    scale = np.max(np.abs(one), axis=(0, 2, 3))[None, :, None, None]
    worst = float(np.max(np.abs(one - two) / scale))
    if worst > 1e-5:
        fail(f"the forecast at domain 2 differs from the serial one by {worst:.2e}")
    print(f"predict: 1 and 2 ranks agree (worst {worst:.2e} of each variable's largest magnitude)")

    # The exported graph, in PyTorch: the same first step.
    trained = initializers(f"{WORK}/serial_trained.onnx")
    initial = initializers(f"{WORK}/model.onnx")
    if all(np.array_equal(trained[k], initial[k]) for k in trained):
        fail("model.export holds the initial weights")
    model = PeriodicResidual().eval()
    state = model.state_dict()
    for k in state:
        state[k] = torch.from_numpy(trained[k].copy())
    model.load_state_dict(state)
    with h5py.File(H5, "r") as f:
        x = f["fields"][100:101].astype(np.float64)
        mean, std = f["fields"].attrs["mean"], f["fields"].attrs["std"]
    norm = ((x - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(norm)).numpy().astype(np.float64)
    y = y * std[None, :, None, None] + mean[None, :, None, None]
    if not np.allclose(one[0], x[0], rtol=0, atol=0):
        fail("the forecast's first time is not the initial state")
    worst = float(np.max(np.abs(one[1] - y[0]) / scale[0]))
    if worst > 1e-5:
        fail(f"predict's first step differs from PyTorch with the exported weights by {worst:.2e}")
    print(f"export: PyTorch with the exported weights reproduces predict's first step (worst {worst:.2e})")


def check_fixed_batch():
    """A graph exported with a fixed batch of 4: refused where a replica trains on 2,
    and predict pads its one sample to 4: the dynamic graph's forecast."""
    fixed = os.path.join(WORK, "fixed4.onnx")
    export_model(fixed, batch=4)
    p = run(2, os.path.join(WORK, "bad.yaml"), "--set", f"model.path={fixed}", expect=1)
    if "data.batch_size: " not in p.stderr or "fixed batch of 4" not in p.stderr:
        fail(f"a fixed batch of 4 at 2 per replica: expected an error naming data.batch_size, got:\n{p.stderr}")
    out = os.path.join(WORK, "fixed4_forecast.nc")
    run(1, "predict", os.path.join(WORK, "serial.yaml"), "--set", f"model.path={fixed}", "--set",
        f"predict.output={out}")
    worst = float(np.max(np.abs(forecast(out) - forecast(f"{WORK}/serial_forecast.nc"))))
    if worst > 1e-6 * float(np.max(np.abs(forecast(out)))):
        fail(f"predict through the fixed-batch graph differs from the dynamic one's by {worst:.2e}")
    print(f"fixed batch: refused at 2 per replica; predict padded to 4 equals the dynamic graph's (max {worst:.2e})")


def check_netcdf():
    """The netCDF twin of the HDF5 data, normalised by the statistics `tessera-run stats`
    writes for it: the HDF5 run's losses, split over 2 latitude bands."""
    stats = os.path.join(WORK, "twin_stats.h5")
    cfg = config("netcdf", "{data: none, tensor: 1, domain: 2}")
    run(1, "stats", cfg, "--set", f"data.path={TWIN}", "--set", f"data.stats={stats}")
    run(2, cfg, "--set", f"data.path={TWIN}", "--set", f"data.stats={stats}")
    h5 = config("netcdf_h5", "{data: none, tensor: 1, domain: 2}")
    run(2, h5, "--set", f"data.stats={stats}")
    same_losses("netcdf", "netcdf_h5", list(range(1, STEPS + 1)), tol=1e-6)


def check_errors():
    cfg = config("bad", "{data: ddp, tensor: 1, domain: 1}")
    cases = [
        (["--set", "data.variables=[h, u]"], "model.path", "2 channels"),
        (["--set", f"model.path={WORK}/missing.onnx"], "model.path", "missing.onnx"),
        (["--set", "parallelism.tensor=2"], "parallelism.tensor", "model.type onnx"),
        (["--set", f"model.path={WORK}/valid.onnx"], "model.path", "[2, 3, 30, 62]"),
        (["--set", f"model.path={WORK}/softmax.onnx", "--set", "parallelism={data: none, tensor: 1, domain: 2}",
          "--dry-run"], "parallelism.domain", "'/Softmax'"),
    ]
    export_model(os.path.join(WORK, "valid.onnx"), ValidConv)
    export_model(os.path.join(WORK, "softmax.onnx"), SoftmaxOverLatitude)
    for args, key, detail in cases:
        p = run(2, cfg, *args, expect=1)
        lines = [l for l in (p.stdout + p.stderr).splitlines() if "error" in l.lower()]
        if len(lines) != 1 or key not in lines[0] or detail not in lines[0] or lines[0].count("(on rank") > 1:
            fail(f"{args}: expected one error line naming {key} and {detail!r}, got:\n{p.stdout + p.stderr}")
        print(f"bad config {args}: {lines[0]}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    export_model(os.path.join(WORK, "model.onnx"))
    check_errors()
    check_training()
    check_resume()
    check_predict()
    check_fixed_batch()
    check_netcdf()
    print("PASSED")


if __name__ == "__main__":
    main()
