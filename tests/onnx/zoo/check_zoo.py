#!/usr/bin/python3
"""tessera against PyTorch on the ONNX test zoo (issue 42).

    check_zoo.py TESSERA_ONNX WORKDIR

Exports the zoo with PyTorch's own exporter (make_zoo.py, beside this script), then for
each model runs `tessera-onnx run` and `tessera-onnx grad` and holds them to PyTorch: the
output within 1e-5 of the output's largest magnitude, and the gradient of sum(y * w) with
respect to every initializer that holds a parameter within 1e-5 of that gradient's largest
magnitude (f32 throughout). The gradients are keyed by initializer name on both sides, so
a parameter tessera does not see, or sees under another name, fails the check. Where
ONNX Runtime is reachable (node and the npm package onnxruntime-node on NODE_PATH), the
output is held to ONNX Runtime's too, within the same bound (ort_run.js).
Exit 77 (skipped) without torch.
"""
import os
import subprocess
import sys

import numpy as np

TOLERANCE = 1e-5


def relative_error(got, want):
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode}:\n{result.stdout}{result.stderr}")


def onnx_runtime_available():
    try:
        return subprocess.run(["node", "-e", "require('onnxruntime-node')"], capture_output=True).returncode == 0
    except OSError:
        return False


def check_against_onnx_runtime(folder, y):
    here = os.path.dirname(os.path.abspath(__file__))
    ort_path = os.path.join(folder, "ort_y.npy")
    run(["node", os.path.join(here, "ort_run.js"), os.path.join(folder, "model.onnx"), os.path.join(folder, "x.npy"),
         ort_path])
    y_ort = np.load(ort_path)
    if y_ort.shape != y.shape:
        return [f"output shape {y.shape}, ONNX Runtime {y_ort.shape}"]
    error = relative_error(y, y_ort)
    print(f"  output vs ONNX Runtime: relative error {error:.2e}")
    return [f"output off ONNX Runtime's by {error:.2e}"] if error > TOLERANCE else []


def check_model(tool, folder, with_onnx_runtime):
    model = os.path.join(folder, "model.onnx")
    x, w = os.path.join(folder, "x.npy"), os.path.join(folder, "w.npy")
    y_path, grads_path = os.path.join(folder, "tessera_y.npy"), os.path.join(folder, "tessera_grads.npz")
    run([tool, "run", model, x, y_path])
    run([tool, "grad", model, x, w, grads_path])
    failures = []
    y, y_ref = np.load(y_path), np.load(os.path.join(folder, "y.npy"))
    if y.shape != y_ref.shape:
        failures.append(f"output shape {y.shape}, PyTorch {y_ref.shape}")
    else:
        error = relative_error(y, y_ref)
        print(f"  output: relative error {error:.2e}")
        if error > TOLERANCE:
            failures.append(f"output off by {error:.2e}")
    if with_onnx_runtime:
        failures += check_against_onnx_runtime(folder, y)
    grads, grads_ref = np.load(grads_path), np.load(os.path.join(folder, "grads.npz"))
    missing = sorted(set(grads_ref.files) - set(grads.files))
    if missing:
        failures.append(f"no tessera gradient for {missing}")
    worst = (0.0, "")
    for name in sorted(set(grads_ref.files) & set(grads.files)):
        if grads[name].shape != grads_ref[name].shape:
            failures.append(f"gradient of {name}: shape {grads[name].shape}, PyTorch {grads_ref[name].shape}")
            continue
        error = relative_error(grads[name], grads_ref[name])
        worst = max(worst, (error, name))
        if error > TOLERANCE:
            failures.append(f"gradient of {name} off by {error:.2e}")
    print(f"  {len(grads_ref.files)} parameter gradients: worst relative error {worst[0]:.2e} ({worst[1]})")
    return failures


def main():
    tool, workdir = sys.argv[1], sys.argv[2]
    try:
        import torch  # noqa: F401  (the zoo is exported by PyTorch)
    except ImportError:
        print("skipped: PyTorch (python3-torch) is not installed")
        sys.exit(77)
    here = os.path.dirname(os.path.abspath(__file__))
    run([sys.executable, os.path.join(here, "make_zoo.py"), workdir])
    with_onnx_runtime = onnx_runtime_available()
    if not with_onnx_runtime:
        print("ONNX Runtime (onnxruntime-node) not reachable: outputs held to PyTorch only")
    failed = 0
    models = sorted(d for d in os.listdir(workdir) if os.path.isdir(os.path.join(workdir, d)))
    for name in models:
        print(f"{name}:")
        failures = check_model(tool, os.path.join(workdir, name), with_onnx_runtime)
        for failure in failures:
            print(f"  FAIL {failure}")
        failed += bool(failures)
    print(f"{len(models) - failed} of {len(models)} zoo models match PyTorch")
    sys.exit(1 if failed or not models else 0)


if __name__ == "__main__":
    main()
