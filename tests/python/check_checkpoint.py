#!/usr/bin/python3
"""Reads tessera checkpoints with h5py as any user would, and checks them against the
serial model's master weights written by write_reference_checkpoints.

    /usr/bin/python3 check_checkpoint.py OUTDIR [FORMAT_VERSION]

For each layout (OUTDIR/per_rank, OUTDIR/shared): follows `latest`, opens
checkpoint.h5, and checks that every /model dataset is the full master array equal to
OUTDIR/reference.h5 (bf16 compared as its 16-bit patterns), that the attributes
documented in docs/checkpoint-format.md are there, and that every checksum
recomputed with numpy matches, with the algorithm the header names (format 2:
tessera-hashsum64-v2; format 1, still read: tessera-hashsum64-v1). Exits 1 on any
mismatch.
"""

import os
import sys

import h5py
import numpy as np

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fmix32(z):
    z = z ^ (z >> np.uint32(16))
    z = z * np.uint32(0x85EBCA6B)
    z = z ^ (z >> np.uint32(13))
    z = z * np.uint32(0xC2B2AE35)
    return z ^ (z >> np.uint32(16))


def checksum_v2(array):
    """Sum over 32-bit words of fmix32(word ^ key(j)) mod 2^64: a 2- or 4-byte element is
    one word at j = i, an 8-byte one two words (low, high) at j = 2i, 2i + 1."""
    flat = np.ascontiguousarray(array).reshape(-1)
    width = flat.dtype.itemsize
    words = flat.view(np.uint16).astype(np.uint32) if width == 2 else flat.view(np.uint32)
    j = np.arange(words.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = ((j & np.uint64(0xFFFFFFFF)).astype(np.uint32) * np.uint32(0x9E3779B1)
               + (j >> np.uint64(32)).astype(np.uint32) * np.uint32(0x85EBCA77) + np.uint32(0x165667B1))
        return int(np.sum(fmix32(words ^ key).astype(np.uint64), dtype=np.uint64))


def checksum_v1(array):
    """Sum over elements of mix64(mix64(i + golden) ^ bits) mod 2^64, i the C-order index."""
    flat = np.ascontiguousarray(array).reshape(-1)
    width = flat.dtype.itemsize
    bits = flat.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[width]).astype(np.uint64)
    index = np.arange(flat.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        hashes = mix64(mix64(index + np.uint64(0x9E3779B97F4A7C15)) ^ bits)
        return int(np.sum(hashes, dtype=np.uint64))


def as_str(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def main():
    outdir = sys.argv[1]
    want_version = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    failures = []
    with h5py.File(os.path.join(outdir, "reference.h5"), "r") as ref:
        reference = {name: ref["model"][name][()] for name in ref["model"]}
    print(f"reference: {len(reference)} master tensors")

    for layout in ("per_rank", "shared"):
        root = os.path.join(outdir, layout)
        with open(os.path.join(root, "latest")) as pointer:
            step_dir = pointer.read().strip()
        path = os.path.join(root, step_dir, "checkpoint.h5")
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs[k] for k in f.attrs}
            version = int(attrs.get("format_version", 0))
            if version != want_version:
                failures.append(f"{path}: format_version {version}, expected {want_version}")
            algorithm = {1: "tessera-hashsum64-v1", 2: "tessera-hashsum64-v2"}.get(version)
            checksum = checksum_v1 if version == 1 else checksum_v2
            expect = {"format": "tessera-checkpoint", "layout": layout, "checksum_algorithm": algorithm}
            for key, want in expect.items():
                if as_str(attrs.get(key)) != want:
                    failures.append(f"{path}: root attribute {key} = {attrs.get(key)!r}, expected {want!r}")
            if int(attrs["step"]) != 7 or int(attrs["mesh_tp"]) != 2:
                failures.append(f"{path}: step/mesh_tp = "
                                f"{attrs['step']}, {attrs['mesh_tp']}")
            if f"layout: {layout}" not in as_str(attrs["metadata"]):
                failures.append(f"{path}: metadata {attrs['metadata']!r}")
            if as_str(f["optimizer"].attrs["type"]) != "AdamW" or int(f["optimizer"].attrs["step_count"]) != 2:
                failures.append(f"{path}: optimizer attributes {dict(f['optimizer'].attrs)}")

            names = list(f["model"])
            if sorted(names) != sorted(reference):
                failures.append(f"{path}: /model holds {names}, expected {sorted(reference)}")
            for name in names:
                dset = f["model"][name]
                data = dset[()]
                want = reference.get(name)
                if want is None:
                    continue
                dtype = as_str(dset.attrs["dtype"])
                if data.shape != want.shape or data.dtype != want.dtype:
                    failures.append(f"{path}: /model/{name} is {data.dtype}{data.shape}, "
                                    f"expected {want.dtype}{want.shape}")
                elif not np.array_equal(data.view(np.uint8), want.view(np.uint8)):
                    failures.append(f"{path}: /model/{name} differs from the serial model's master weight")
                if (dtype == "bf16") != (data.dtype == np.uint16):
                    failures.append(f"{path}: /model/{name} dtype attribute {dtype} vs stored {data.dtype}")
                if "placement" not in dset.attrs or "tp:" not in as_str(dset.attrs["placement"]):
                    failures.append(f"{path}: /model/{name} has no placement attribute")
            # Every dataset's checksum, optimizer state included.
            for section in ("model", "optimizer"):
                for name in f[section]:
                    dset = f[section][name]
                    got, stored = checksum(dset[()]), int(dset.attrs["checksum"])
                    if got != stored:
                        failures.append(f"{path}: /{section}/{name} checksum {got:#018x} != stored {stored:#018x}")
            if layout == "per_rank":
                if not f["model"]["0.weight"].is_virtual:
                    failures.append(f"{path}: /model/0.weight is not a virtual dataset")
            # bf16 is readable as float32 by shifting the 16 bits into the high half.
            bf16 = f["model"]["3.weight"][()]
            as_float = (bf16.astype(np.uint32) << 16).view(np.float32)
            if not np.all(np.isfinite(as_float)) or np.all(as_float == 0):
                failures.append(f"{path}: /model/3.weight does not decode as bf16")
        print(f"{layout}: {path}: {len(names)} model tensors checked")

    for failure in failures:
        print("FAIL", failure)
    print("h5py check:", "FAILED" if failures else "all master weights equal the serial model's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
