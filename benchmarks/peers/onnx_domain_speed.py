#!/usr/bin/python3
"""Domain-parallel inference of imported CNNs: tessera-onnx at 1 rank against itself
split over N ranks (--domain N), in the same run (docs/performance.md, issue 42).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 benchmarks/peers/onnx_domain_speed.py \\
        TESSERA_ONNX WORKDIR [RANKS] [ROUNDS]

The zoo's CNNs (tests/onnx/zoo/make_zoo.py: the U-Net, the ResNet and the periodic CNN)
are exported by PyTorch's exporter with 8 input channels on a 360 x 720 field, one
sample. ROUNDS (default 3) alternating rounds run `tessera-onnx time` serially and under
`mpiexec -n RANKS ... --domain RANKS` (default 2); each is the median of 5 forwards (and
forward + backward) after a warm-up. The table gives each median over the rounds and the
speedup (serial time / split time). One BLAS thread per rank: the split run uses RANKS
cores where the serial one uses one.
"""
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "onnx", "zoo"))
import make_zoo  # noqa: E402  (the zoo's models)

SHAPE = (1, 8, 360, 720)
MODELS = {"unet": {"c_in": 8, "width": 8}, "resnet": {"c_in": 8, "width": 8}, "periodic": {"c_in": 8, "width": 8}}


def export(name, folder):
    make, _, opset = make_zoo.MODELS[name]
    torch.manual_seed(0)
    model = make(**MODELS[name]).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32))
    path = os.path.join(folder, name + ".onnx")
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"], output_names=["y"],
                      do_constant_folding=True, training=torch.onnx.TrainingMode.PRESERVE)
    np.save(os.path.join(folder, name + ".npy"), x.numpy())
    return path, os.path.join(folder, name + ".npy")


def timed(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    return {out[i]: float(out[i + 1]) for i in range(0, len(out), 2)}


def main():
    tool, workdir = sys.argv[1], sys.argv[2]
    ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    print(f"| model | serial forward (s) | {ranks}-rank forward (s) | speedup | serial fwd+bwd (s) | "
          f"{ranks}-rank fwd+bwd (s) | speedup |")
    print("|---|---|---|---|---|---|---|")
    for name in MODELS:
        model, x = export(name, workdir)
        serial, split = [], []
        for _ in range(rounds):
            serial.append(timed([tool, "time", model, x, "5"]))
            split.append(timed(["mpiexec", "-n", str(ranks), tool, "time", model, x, "5", "--domain", str(ranks)]))
        s_fwd = float(np.median([t["forward_s"] for t in serial]))
        p_fwd = float(np.median([t["forward_s"] for t in split]))
        s_train = float(np.median([t["train_step_s"] for t in serial]))
        p_train = float(np.median([t["train_step_s"] for t in split]))
        print(f"| {name} | {s_fwd:.4f} | {p_fwd:.4f} | {s_fwd / p_fwd:.2f} | {s_train:.4f} | {p_train:.4f} | "
              f"{s_train / p_train:.2f} |", flush=True)


if __name__ == "__main__":
    main()
