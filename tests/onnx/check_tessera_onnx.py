#!/usr/bin/python3
"""tessera-onnx against numpy, on models made here with onnx.helper.

    check_tessera_onnx.py TESSERA_ONNX WORK_DIR WRITE_TEST_NPZ

Always: `run` of a graph whose output is its input (f32 and f64: the .npy reader and
writer), `info`, and the refusals (Fortran order, another dtype, a dtype the model does
not take, the not-yet parallel flags), and the .npz writer on a known set of arrays
(write_test_npz: numpy reads them back, zipfile checks every CRC). Then `run` and `grad` of
y = tanh(x W + b) * s against numpy (MatMul, Add, Tanh, Mul from tessera's ops); an op the
build refuses is a failure.
"""
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TOOL, WORK, WRITE_TEST_NPZ = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
failures = []


def path(name):
    return os.path.join(WORK, name)


def tool(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120)


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


def expect_refusal(args, needles, what):
    r = tool(*args)
    check(r.returncode == 2, f"{what}: exit {r.returncode}, expected 2")
    for needle in needles:
        check(needle in r.stderr, f"{what}: '{needle}' not in: {r.stderr.strip()}")


def save_model(graph, name):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path(name))
    return path(name)


def identity_model(elem_type, name):
    x = helper.make_tensor_value_info("x", elem_type, ["batch", 3])
    return save_model(helper.make_graph([], "identity", [x], [x]), name)


# --- The identity graph: .npy in and out, f32 and f64 ---------------------------------
rng = np.random.default_rng(42)
for dtype, elem_type in ((np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)):
    model = identity_model(elem_type, f"identity_{dtype.__name__}.onnx")
    x = rng.standard_normal((4, 3)).astype(dtype)
    np.save(path("x.npy"), x)
    r = tool("run", model, path("x.npy"), path("y.npy"))
    check(r.returncode == 0, f"run identity {dtype.__name__}: {r.stderr.strip()}")
    if r.returncode == 0:
        y = np.load(path("y.npy"))
        check(y.dtype == dtype and np.array_equal(y, x), f"run identity {dtype.__name__}: output differs")

model32 = path("identity_float32.onnx")
r = tool("info", model32)
check(r.returncode == 0 and "x: float[?, 3]" in r.stdout and "nodes: 0" in r.stdout, f"info: {r.stdout}{r.stderr}")

np.save(path("fortran.npy"), np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float32)))
expect_refusal(["run", model32, path("fortran.npy"), path("o.npy")], ["fortran.npy", "Fortran order"], "fortran order")
np.save(path("ints.npy"), np.arange(12, dtype=np.int32).reshape(4, 3))
expect_refusal(["run", model32, path("ints.npy"), path("o.npy")], ["ints.npy", "<i4"], "int32 array")
np.save(path("x64.npy"), rng.standard_normal((4, 3)))
expect_refusal(["run", model32, path("x64.npy"), path("o.npy")], ["input 'x'", "float[4, 3]", "f64[4, 3]"],
               "f64 into an f32 model")
expect_refusal(["run", model32, path("x64.npy"), path("o.npy"), "--domain", "2"], ["--domain 2", "mpiexec -n 2"],
               "--domain 2 in a 1-rank job")
expect_refusal(["run", model32, path("x64.npy"), path("o.npy"), "--tensor", "2"], ["--tensor", "not supported yet"],
               "--tensor")
expect_refusal(["run", model32, path("x64.npy"), path("o.npy"), "--grid", "2"], ["--grid", "LATxLON"], "--grid 2")
with open(path("truncated.npy"), "wb") as f:
    f.write(open(path("x64.npy"), "rb").read()[:-5])
expect_refusal(["run", model32, path("truncated.npy"), path("o.npy")], ["truncated.npy", "bytes of data"],
               "a truncated .npy")
expect_refusal(["frobnicate"], ["usage"], "an unknown command")

# --- The .npz writer: keys, dtypes, shapes, values, CRCs --------------------------------
r = subprocess.run([WRITE_TEST_NPZ, path("known.npz")], capture_output=True, text=True, timeout=60)
check(r.returncode == 0, f"write_test_npz: {r.stderr.strip()}")
if r.returncode == 0:
    with zipfile.ZipFile(path("known.npz")) as z:
        check(z.testzip() is None, "known.npz: a CRC does not match")
        check(all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), "known.npz: not stored")
    known = np.load(path("known.npz"))
    check(sorted(known.files) == ["/block.0/conv.weight", "bias", "scale"], f"known.npz keys {known.files}")
    w = known["/block.0/conv.weight"]
    check(w.dtype == np.float32 and w.shape == (2, 3), f"known.npz weight {w.dtype} {w.shape}")
    check(np.array_equal(w, (0.5 * np.arange(6) - 1.0).astype(np.float32).reshape(2, 3)), "known.npz weight values")
    check(np.array_equal(known["bias"], np.array([1.25, -2.5, 3.75, 1e-300])), "known.npz bias values")
    check(known["scale"].shape == () and known["scale"] == 0.125, "known.npz scalar")

if failures:
    sys.exit(1)

# --- y = tanh(x W + b) * s with tessera's ops: run and grad against numpy ------------
W = rng.standard_normal((3, 5)).astype(np.float64)
b = rng.standard_normal((5,)).astype(np.float64)
s = np.array(0.5, dtype=np.float64)
nodes = [
    helper.make_node("MatMul", ["x", "W"], ["xw"], name="/fc/MatMul"),
    helper.make_node("Add", ["xw", "b"], ["z"], name="/fc/Add"),
    helper.make_node("Tanh", ["z"], ["t"], name="/act/Tanh"),
    helper.make_node("Mul", ["t", "s"], ["y"], name="/scale/Mul"),
]
graph = helper.make_graph(
    nodes, "mlp",
    [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["batch", 3])],
    [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["batch", 5])],
    [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(s, "s")])
mlp = save_model(graph, "mlp.onnx")
x = rng.standard_normal((4, 3))
weight = rng.standard_normal((4, 5))
np.save(path("x.npy"), x)
np.save(path("weight.npy"), weight)
r = tool("run", mlp, path("x.npy"), path("y.npy"))
check(r.returncode == 0, f"run mlp: {r.stderr.strip()}")
t = np.tanh(x @ W + b)
if r.returncode == 0:
    check(np.allclose(np.load(path("y.npy")), t * s, rtol=1e-12, atol=1e-12), "run mlp: output differs from numpy")
r = tool("grad", mlp, path("x.npy"), path("weight.npy"), path("grads.npz"))
check(r.returncode == 0, f"grad mlp: {r.stderr.strip()}")
if r.returncode == 0:
    with zipfile.ZipFile(path("grads.npz")) as z:
        check(z.testzip() is None, "grads.npz: a CRC does not match")
    grads = np.load(path("grads.npz"))
    dz = weight * s * (1 - t * t)
    expected = {"W": x.T @ dz, "b": dz.sum(axis=0)}
    # s feeds Mul's differentiable input: a parameter too.
    expected["s"] = np.array((weight * t).sum())
    check(sorted(grads.files) == sorted(expected), f"grads.npz keys {sorted(grads.files)}")
    for key, value in expected.items():
        if key in grads.files:
            check(np.allclose(grads[key], value, rtol=1e-10, atol=1e-12), f"grad of {key} differs from numpy")
sys.exit(1 if failures else 0)
