#!/usr/bin/python3
"""tessera against ONNX Runtime (inference) and PyTorch eager (a training step) on the
ONNX zoo's models, one thread each, in the same run (docs/performance.md).

    OPENBLAS_NUM_THREADS=1 NODE_PATH=<dir>/node_modules \\
      /usr/bin/python3 benchmarks/peers/onnx_zoo_speed.py TESSERA_ONNX WORKDIR [ROUNDS]

Each model of tests/onnx/zoo/make_zoo.py is built at a benchmark size (below) and exported
by PyTorch's exporter; then ROUNDS (default 5) alternating rounds time
`tessera-onnx time` (forward; forward + backward), ONNX Runtime's CPU library through
ort_time.js (forward; onnxruntime-node, one intra-op thread) and PyTorch eager
(forward + backward of sum(y)), each the median of 30 repeats after a warm-up; the table
gives each tool's median over the rounds and the ratios (peer time / tessera time: above
1, tessera is faster).
"""
import os
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "onnx", "zoo"))
import make_zoo  # noqa: E402  (the zoo's models)

REPEATS = 30
# name -> (constructor arguments, input shape) at a size where the arithmetic shows.
SIZES = {
    "unet": ({}, (4, 2, 64, 128)),
    "resnet": ({}, (8, 2, 64, 64)),
    "column_mlp": ({}, (16384, 6)),
    "vit": ({"size": 32}, (8, 2, 32, 32)),
    "periodic": ({}, (4, 2, 90, 180)),
}


def export(name, folder):
    make, _, opset = make_zoo.MODELS[name]
    kwargs, shape = SIZES[name]
    torch.manual_seed(0)
    model = make(**kwargs).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    path = os.path.join(folder, name + ".onnx")
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"], output_names=["y"],
                      do_constant_folding=True, training=torch.onnx.TrainingMode.PRESERVE)
    np.save(os.path.join(folder, name + ".npy"), x.numpy())
    return model, x, path, os.path.join(folder, name + ".npy")


def timed_line(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    return {out[i]: float(out[i + 1]) for i in range(0, len(out), 2)}


def torch_train_step(model, x):
    def step():
        model.zero_grad()
        model(x).sum().backward()
    step()
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return sorted(seconds)[len(seconds) // 2]


def main():
    tool, workdir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    torch.set_num_threads(1)
    os.makedirs(workdir, exist_ok=True)
    print("| model | input | tessera forward | ORT forward | ORT / tessera | tessera train step | "
          "PyTorch train step | PyTorch / tessera |")
    print("|---|---|---|---|---|---|---|---|")
    for name in make_zoo.MODELS:
        model, x, path, npy = export(name, workdir)
        tf, tt, of, pt = [], [], [], []
        for _ in range(rounds):
            t = timed_line([tool, "time", path, npy, str(REPEATS)])
            tf.append(t["forward_s"])
            tt.append(t["train_step_s"])
            of.append(timed_line(["node", os.path.join(HERE, "ort_time.js"), path, npy, str(REPEATS)])["forward_s"])
            pt.append(torch_train_step(model.train(False), x))
        med = lambda v: float(np.median(v))  # noqa: E731
        print(f"| {name} | {list(x.shape)} | {med(tf) * 1e3:.3f} ms | {med(of) * 1e3:.3f} ms | "
              f"{med(of) / med(tf):.2f} | {med(tt) * 1e3:.3f} ms | {med(pt) * 1e3:.3f} ms | {med(pt) / med(tt):.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
