#!/usr/bin/python3
"""tessera-ckpt export and import checked with numpy and h5py alone (no PyTorch).

    /usr/bin/python3 check_safetensors.py TESSERA_CKPT FIXTURE_DIR WORKDIR

FIXTURE_DIR is the write_reference_checkpoints fixture (a tp = 2 checkpoint in both
layouts and the serial model's masters in reference.h5). Checks that

- export writes a file that an independent numpy reader (safetensors_numpy.py) parses:
  header length a multiple of 8, tensors tiling the data, every tensor equal bit for
  bit to the serial master weight (bf16 as its bits), from both layouts;
- import of that file gives back the same master weights (h5py), with and without a
  mapping that renames, transposes and fuses tensors (the mapping is reversible);
- a file written by numpy with F16, F64 and I32 tensors imports with --dtype;
- broken inputs fail with exit status 2, a message naming the file and the tensor, key,
  dtype or shape at fault, and no checkpoint directory left behind.

Exits 1 on any failure.
"""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_numpy as st  # noqa: E402

FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL", message)


def run(tool, *args, expect=0):
    proc = subprocess.run([tool, *args], capture_output=True, text=True)
    if proc.returncode != expect:
        fail(f"tessera-ckpt {' '.join(args)}: exit {proc.returncode}, expected {expect}\n"
             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def masters(checkpoint_h5):
    with h5py.File(checkpoint_h5, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


def latest_file(root):
    with open(os.path.join(root, "latest")) as pointer:
        return os.path.join(root, pointer.read().strip(), "checkpoint.h5")


def same_bits(a, b):
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and \
        np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def check_layout_of_file(path):
    n, header = st.read_header(path)
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8")
    spans = sorted(tuple(e["data_offsets"]) for k, e in header.items() if k != "__metadata__")
    end = 0
    for begin, stop in spans:
        if begin != end:
            fail(f"{path}: tensors do not tile the data section ({begin} after {end})")
        end = stop
    if os.path.getsize(path) != 8 + n + end:
        fail(f"{path}: file size {os.path.getsize(path)} != 8 + {n} + {end}")
    return header


MAPPING = """\
# The fixture's three linears fused into one [36, 8] tensor (the middle one stored
# transposed), the biases renamed, the bf16 table renamed.
tensors:
  0.weight: {from: fused.weight, split: {dim: 0, index: 0, sizes: [16, 16, 4]}}
  1.weight: {from: fused.weight, split: {dim: 0, index: 1, sizes: [16, 16, 4]}, transpose: true}
  2.weight: {from: fused.weight, split: {dim: 0, index: 2, sizes: [16, 16, 4]}}
  "*.bias": net.*.b
  3.weight: table
"""


def main():
    tool, fixture, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    reference = masters(os.path.join(fixture, "reference.h5"))

    # 1. Export from both layouts, read with numpy.
    for layout in ("per_rank", "shared"):
        out = os.path.join(work, f"{layout}.safetensors")
        run(tool, "export", os.path.join(fixture, layout), out, "--format", "safetensors")
        header = check_layout_of_file(out)
        tensors, metadata = st.load(out)
        if metadata.get("format") != "pt" or metadata.get("tessera_step") != "7" or \
                f"layout: {layout}" not in metadata.get("tessera_metadata", ""):
            fail(f"{out}: __metadata__ {metadata}")
        if sorted(tensors) != sorted(reference):
            fail(f"{out}: keys {sorted(tensors)}, expected {sorted(reference)}")
        for name, want in reference.items():
            got = tensors.get(name)
            if got is None:
                continue
            expected_dtype = "BF16" if want.dtype == np.uint16 else "F32"
            if header[name]["dtype"] != expected_dtype or not same_bits(got, want):
                fail(f"{out}: {name} is {header[name]['dtype']}{list(got.shape)}, differs from the serial master")
        print(f"export {layout}: {len(tensors)} tensors equal the serial masters")

    # 2. Import what was exported: the same masters, at the stored step's metadata.
    root = os.path.join(work, "reimported")
    run(tool, "import", os.path.join(work, "shared.safetensors"), root, "--step", "3", "--layout", "per_rank")
    got = masters(latest_file(root))
    for name, want in reference.items():
        if name not in got or not same_bits(got[name], want):
            fail(f"{root}: /model/{name} differs after export + import")
    with h5py.File(latest_file(root), "r") as f:
        if "layout: shared" not in f.attrs["metadata"]:
            fail(f"{root}: the exported metadata did not come back: {f.attrs['metadata']!r}")
    run(tool, "verify", root)
    print(f"import: {len(got)} tensors back, bit for bit")
    # Issue 46: an import below the root's newest step would move `latest` back.
    proc = run(tool, "import", os.path.join(work, "shared.safetensors"), root, "--step", "2", expect=2)
    if "already holds step_00000003, newer than --step 2" not in proc.stderr:
        fail(f"import below the newest step: {proc.stderr.strip()}")
    with open(os.path.join(root, "latest")) as f:
        if f.read().strip() != "step_00000003" or os.path.exists(os.path.join(root, "step_00000002")):
            fail(f"{root}: an import below the newest step changed the root")

    # 3. The same with a mapping that fuses, transposes and renames: reversible.
    mapping = os.path.join(work, "mapping.yaml")
    with open(mapping, "w") as f:
        f.write(MAPPING)
    fused = os.path.join(work, "fused.safetensors")
    run(tool, "export", os.path.join(fixture, "per_rank"), fused, "--mapping", mapping)
    tensors, _ = st.load(fused)
    want_fused = np.concatenate([reference["0.weight"], reference["1.weight"].T, reference["2.weight"]])
    if sorted(tensors) != sorted(["fused.weight", "net.0.b", "net.1.b", "net.2.b", "table"]):
        fail(f"{fused}: keys {sorted(tensors)}")
    elif not same_bits(tensors["fused.weight"], want_fused) or not same_bits(tensors["net.1.b"], reference["1.bias"]) \
            or not same_bits(tensors["table"], reference["3.weight"]):
        fail(f"{fused}: the fused/renamed tensors differ from the masters")
    root = os.path.join(work, "mapped")
    run(tool, "import", fused, root, "--mapping", mapping)
    got = masters(latest_file(root))
    for name, want in reference.items():
        if name not in got or not same_bits(got[name], want):
            fail(f"{root}: /model/{name} differs after a mapped export + import")
    print("mapping: fused, transposed and renamed tensors go out and come back bit for bit")

    # 4. A numpy-written file with dtypes tessera converts on request.
    rng = np.random.default_rng(7)
    mixed = os.path.join(work, "mixed.safetensors")
    half = rng.standard_normal((3, 5)).astype(np.float16)
    double = rng.standard_normal((4,))
    ints = np.arange(-3, 3, dtype=np.int32)
    st.save(mixed, [("h", half), ("d", double), ("i", ints)])
    proc = run(tool, "import", mixed, os.path.join(work, "nodtype"), expect=2)
    if "'h'" not in proc.stderr or "F16" not in proc.stderr or mixed not in proc.stderr:
        fail(f"F16 without --dtype: the message does not name the file, tensor and dtype: {proc.stderr}")
    run(tool, "import", mixed, os.path.join(work, "converted"), "--dtype", "f32")
    got = masters(latest_file(os.path.join(work, "converted")))
    if got["h"].dtype != np.float32 or not np.array_equal(got["h"], half.astype(np.float32)) or \
            got["d"].dtype != np.float32 or not np.array_equal(got["d"], double.astype(np.float32)) or \
            got["i"].dtype != np.int64 or not np.array_equal(got["i"], ints):
        fail(f"--dtype f32: {got}")
    print("dtypes: F16 and F64 convert to f32, I32 to i64")

    # 5. Broken inputs: exit 2, a message naming what is at fault, nothing written.
    good = os.path.join(work, "good.safetensors")
    st.save(good, [("a", np.ones((2, 3), np.float32)), ("b", np.zeros((4,), np.float32))])
    n, header = st.read_header(good)
    with open(good, "rb") as f:
        data = f.read()[8 + n:]

    def forged(name, header, data=data):
        path = os.path.join(work, name)
        text = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + data)
        return path

    lie = dict(header, b={"dtype": "F32", "shape": [4], "data_offsets": [24, 48]})
    overlap = dict(header, b={"dtype": "F32", "shape": [4], "data_offsets": [8, 24]})
    bad_dtype = dict(header, b={"dtype": "F8_E4M3", "shape": [4], "data_offsets": [24, 40]})
    bad_shape = dict(header, b={"dtype": "F32", "shape": [5], "data_offsets": [24, 40]})
    truncated = os.path.join(work, "truncated.safetensors")
    with open(good, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:-4])
    wrong_map = os.path.join(work, "wrong_map.yaml")
    with open(wrong_map, "w") as f:
        f.write("tensors:\n  x: a\n")
    emulator_meta = os.path.join(work, "emulator.yaml")
    with open(emulator_meta, "w") as f:
        f.write("model:\n  type: field_emulator\n  channels: 2\n  width: 4\n  mlp_hidden: 8\n  blocks: 1\n"
                "  kernel: 3\n  nlat: 4\n  nlon: 8\n")
    cases = [
        ("offsets past the end", [forged("lie.safetensors", lie)], ["lie.safetensors", "'b'", "data_offsets"]),
        ("overlapping tensors", [forged("overlap.safetensors", overlap)], ["'b'", "overlap"]),
        ("unknown dtype", [forged("dtype.safetensors", bad_dtype)], ["'b'", "F8_E4M3"]),
        ("shape and bytes disagree", [forged("shape.safetensors", bad_shape)], ["'b'", "[5]", "16"]),
        ("truncated file", [truncated], ["truncated.safetensors", "'b'"]),
        ("key missing in the mapping", [good, "--mapping", wrong_map], ["wrong_map.yaml", "'b'", "[4]"]),
        ("shape mismatch with the model", [good, "--metadata", emulator_meta, "--mapping", wrong_map.replace(
            "wrong_map", "emu_map")], ["emulator.yaml", "wants"]),
        ("not a safetensors file", [emulator_meta], ["emulator.yaml"]),
        ("a .pt file", [os.path.join(work, "model.pt")], ["pt-to-safetensors"]),
    ]
    with open(wrong_map.replace("wrong_map", "emu_map"), "w") as f:
        f.write("tensors:\n  encoder.weight: a\n  encoder.bias: b\n")
    for what, args, needles in cases:
        out = os.path.join(work, "refused")
        proc = run(tool, "import", args[0], out, *args[1:], expect=2)
        missing = [n for n in needles if n not in proc.stderr]
        if missing:
            fail(f"{what}: the message lacks {missing}: {proc.stderr.strip()}")
        if os.path.exists(os.path.join(out, "step_00000000")):
            fail(f"{what}: a checkpoint was written anyway")
        print(f"refused ({what}): {proc.stderr.strip()}")

    # An export whose mapping misses a tensor writes nothing.
    out = os.path.join(work, "refused.safetensors")
    proc = run(tool, "export", os.path.join(fixture, "shared"), out, "--mapping", wrong_map, expect=2)
    if "'0.weight'" not in proc.stderr or os.path.exists(out):
        fail(f"export with a mapping that misses tensors: {proc.stderr.strip()}")
    leftovers = [name for name in os.listdir(work) if ".tmp-" in name]
    if leftovers:
        fail(f"temporary files left behind: {leftovers}")

    print("safetensors check:", "FAILED" if FAILURES else "passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
