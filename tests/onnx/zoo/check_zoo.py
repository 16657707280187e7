#!/usr/bin/python3
"""tessera against PyTorch on the ONNX test zoo (issue 42).

    check_zoo.py TESSERA_ONNX WORKDIR [MPIEXEC RANKS...]

Exports the zoo with PyTorch's own exporter (make_zoo.py, beside this script), then for
each model runs `tessera-onnx run` and `tessera-onnx grad` and holds them to PyTorch: the
output within 1e-5 of the output's largest magnitude, and the gradient of sum(y * w) with
respect to every initializer that holds a parameter within 1e-5 of that gradient's largest
magnitude (f32 throughout). The gradients are keyed by initializer name on both sides, so
a parameter tessera does not see, or sees under another name, fails the check. Where
ONNX Runtime is reachable (node and the npm package onnxruntime-node on NODE_PATH), the
output is held to ONNX Runtime's too, within the same bound (ort_run.js).

With MPIEXEC and rank counts, the same checks run domain-parallel instead
(`mpiexec -n N tessera-onnx ... --domain N`, DOMAIN_OPTIONS below): the field split over
N ranks, the output gathered, the gradients the full ones. The ViT cannot run split (its
attention mixes every patch of the field): there the check is that tessera refuses it
with an error naming the node, on every rank, instead of computing something else.
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


# Per model and rank count, how the field is split: the zoo's fields are small (8 x 8),
# so the U-Net's two 2x2 poolings need 2 x 2 blocks of even extents at 4 ranks; the column
# MLP's input is [columns, features], split along the columns.
DOMAIN_OPTIONS = {
    ("unet", 4): ["--grid", "2x2"],
    ("column_mlp", 2): ["--split-axis", "0"],
    ("column_mlp", 4): ["--split-axis", "0"],
}
REFUSED_SPLIT = {"vit"}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode}:\n{result.stdout}{result.stderr}")


def check_refused(launch, tool, folder):
    """tessera refuses to split the model: exit 2, every rank naming the node."""
    model, x = os.path.join(folder, "model.onnx"), os.path.join(folder, "x.npy")
    result = subprocess.run(launch + [tool, "run", model, x, os.path.join(folder, "refused.npy")] + launch_options(launch),
                            capture_output=True, text=True, timeout=300)
    message = result.stdout + result.stderr
    if result.returncode == 0 or "cannot run domain-parallel" not in message or "node '" not in message:
        return [f"split run not refused by name (exit {result.returncode}): {message.strip()}"]
    print(f"  refused split: {message.strip().splitlines()[0]}")
    return []


def launch_options(launch):
    return ["--domain", launch[2]] if launch else []


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


def check_model(tool, folder, with_onnx_runtime, launch=()):
    launch = list(launch)
    name = os.path.basename(folder)
    if launch and name in REFUSED_SPLIT:
        return check_refused(launch, tool, folder)
    options = launch_options(launch) + (DOMAIN_OPTIONS.get((name, int(launch[2])), []) if launch else [])
    model = os.path.join(folder, "model.onnx")
    x, w = os.path.join(folder, "x.npy"), os.path.join(folder, "w.npy")
    y_path, grads_path = os.path.join(folder, "tessera_y.npy"), os.path.join(folder, "tessera_grads.npz")
    run(launch + [tool, "run", model, x, y_path] + options)
    run(launch + [tool, "grad", model, x, w, grads_path] + options)
    failures = []
    if launch:
        # `info IN.npy --domain N` lists how each node ran; a CNN's convolutions exchange halos.
        info = subprocess.run(launch + [tool, "info", model, x] + options, capture_output=True, text=True, timeout=300)
        if info.returncode != 0 or "split over" not in info.stdout:
            failures.append(f"info --domain: exit {info.returncode}: {info.stdout}{info.stderr}")
        elif name in ("unet", "resnet", "periodic") and "halo lat" not in info.stdout:
            failures.append(f"info --domain lists no halo exchange:\n{info.stdout}")
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
    mpiexec, rank_counts = (sys.argv[3], sys.argv[4:]) if len(sys.argv) > 3 else (None, [])
    try:
        import torch  # noqa: F401  (the zoo is exported by PyTorch)
    except ImportError:
        print("skipped: PyTorch (python3-torch) is not installed")
        sys.exit(77)
    here = os.path.dirname(os.path.abspath(__file__))
    run([sys.executable, os.path.join(here, "make_zoo.py"), workdir])
    with_onnx_runtime = onnx_runtime_available() and not mpiexec
    if not with_onnx_runtime and not mpiexec:
        print("ONNX Runtime (onnxruntime-node) not reachable: outputs held to PyTorch only")
    failed = 0
    models = sorted(d for d in os.listdir(workdir) if os.path.isdir(os.path.join(workdir, d)))
    launches = [[mpiexec, "-n", n] for n in rank_counts] if mpiexec else [[]]
    for launch in launches:
        for name in models:
            print(f"{name}" + (f" split over {launch[2]} ranks:" if launch else ":"))
            failures = check_model(tool, os.path.join(workdir, name), with_onnx_runtime, launch)
            for failure in failures:
                print(f"  FAIL {failure}")
            failed += bool(failures)
    total = len(models) * len(launches)
    print(f"{total - failed} of {total} zoo checks pass" + (f" (split over {', '.join(rank_counts)} ranks)" if mpiexec else ""))
    sys.exit(1 if failed or not models else 0)


if __name__ == "__main__":
    main()
