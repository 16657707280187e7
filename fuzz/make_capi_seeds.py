#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_capi_shapes (fuzz/corpus/fuzz_capi_shapes/*.bin).

    fuzz/make_capi_seeds.py [output dir]

Each seed is a program in the op language that fuzz/fuzz_capi_shapes.cpp decodes (its
header comment and class Input): an opcode byte, then the op's arguments. The seeds are
valid sessions (mesh, decomposition, halo, fields, exchanges, scatter/gather, checkpoint
save and load) and a few edge cases, so the fuzzer starts from calls that succeed.
"""
import os
import struct
import sys

from seed_files import write_files

MESH, DECOMP, HALO, ADD_FIELD, ADD_STRIDED, EXCHANGE, CLEAR, SCATTER_GATHER, \
    CKPT_BEGIN, CKPT_ADD, CKPT_ADD_HALO, CKPT_COMMIT, DESTROY, MESH_FILE = range(14)
F32, F64 = 0, 1
C, FORTRAN = 0, 1
NAMES = ["a", "b", "c", "t", "u", "", "x/y", ".", "..", "a b", "\u03bb", None]
PLACEMENTS = [None, "", "dp: Replicate, tp: Replicate, domain: Replicate", "domain: Shard(0)",
              "domain: Shard(1)", "tp: Shard(0)", "tp: Shard(1), domain: Shard(0)", "domain: Shard(2)"]
SPECIALS = {"INT_MAX": 6, "INT_MIN": 7, "2^31": 8, "2^32": 10, "INT64_MAX": 11, "INT64_MIN": 12,
            "2^62": 14, "3037000500": 15, "2^40": 16}


def i64(v):
    """Selector encoding of an integer argument (small, 16-bit, special or raw)."""
    if isinstance(v, str):
        return bytes([0x80 | SPECIALS[v]])
    if -8 <= v <= 55:
        return bytes([v + 8])
    if 0 <= v <= 0xFFFF:
        return bytes([0x40, v & 0xFF, v >> 8])
    return bytes([0xC0]) + struct.pack("<q", v)


def enum(v):
    return bytes([v])


def ndim(n):
    assert 1 <= n <= 5
    return bytes([n - 1])


def dims(values):
    return b"".join(i64(v) for v in values)


def op(code, *parts):
    return bytes([code]) + b"".join(parts)


def mesh(data=0, tensor=1, domain=1, dim=3):
    return op(MESH, enum(data), i64(tensor), i64(domain), enum(dim))


def decomp(nlat, nlon, glat=0, glon=0, from_mesh=True, box_rank=0):
    return op(DECOMP, i64(nlat), i64(nlon), i64(glat), i64(glon), bytes([1 if from_mesh else 0]), i64(box_rank))


def halo(lb, la, ob, oa, periodic=1, pole=0):
    return op(HALO, i64(lb), i64(la), i64(ob), i64(oa), bytes([periodic]), enum(pole))


def add_field(dtype, order, shape):
    return op(ADD_FIELD, enum(dtype), enum(order), ndim(len(shape)), dims(shape), b"\0")


def add_strided(dtype, shape, strides):
    return op(ADD_STRIDED, enum(dtype), ndim(len(shape)), dims(shape), dims(strides))


def exchange(variant):
    return op(EXCHANGE, bytes([variant]))


def scatter_gather(variant, dtype, order, shape):
    return op(SCATTER_GATHER, bytes([variant]), enum(dtype), enum(order), ndim(len(shape)), dims(shape), b"\0")


def ckpt_begin(save=True, layout=0, step=1, strict=1):
    if save:
        return op(CKPT_BEGIN, b"\0", enum(layout), i64(step))
    return op(CKPT_BEGIN, b"\1", enum(layout), i64(step), bytes([strict]))


def ckpt_add(name, dtype, order, global_shape, offset, local, placement=None):
    return op(CKPT_ADD, bytes([NAMES.index(name)]), enum(dtype), enum(order), ndim(len(local)),
              dims(global_shape), dims(offset), dims(local), bytes([PLACEMENTS.index(placement)]))


def ckpt_add_halo(name, dtype, order, shape):
    return op(CKPT_ADD_HALO, bytes([NAMES.index(name)]), enum(dtype), enum(order), ndim(len(shape)), dims(shape))


def commit():
    return op(CKPT_COMMIT)


def mesh_file(text):
    data = text.encode()
    return op(MESH_FILE, bytes([len(data)]), data)


SEEDS = {
    # 8 x 16 grid, halo (1, 1, 2, 2): padded 10 x 20; a C f64 and a Fortran f32 field.
    "halo_exchange": mesh() + decomp(8, 16) + halo(1, 1, 2, 2) +
        add_field(F64, C, [2, 10, 20]) + add_field(F32, FORTRAN, [20, 10, 3]) +
        exchange(0) + exchange(1) + exchange(2) + exchange(3) + exchange(4) + op(CLEAR),
    # Latitude-fastest layout through strides: (lev, lat, lon) = (2, 8, 10), lat stride 1.
    "halo_strided": decomp(6, 8, 1, 1, from_mesh=False) + halo(1, 1, 1, 1, 1, 2) +
        add_strided(F64, [2, 8, 10], [80, 1, 8]) + add_strided(F32, [8, 10], [10, 1]) +
        exchange(0) + exchange(3) + exchange(5),
    # Save (shared) and load back a caller array and a halo field.
    "checkpoint_shared": mesh() + decomp(4, 6) + halo(1, 1, 1, 1) +
        ckpt_begin(True, 0, 5) + ckpt_add("a", F64, C, [4, 6], [0, 0], [4, 6], "domain: Shard(0)") +
        ckpt_add_halo("b", F32, C, [2, 6, 8]) + commit() +
        ckpt_begin(False) + ckpt_add("a", F64, C, [4, 6], [0, 0], [4, 6], "domain: Shard(0)") +
        ckpt_add_halo("b", F32, C, [2, 6, 8]) + commit(),
    # per_rank layout, Fortran order, a block of a larger global array (non-strict load).
    "checkpoint_per_rank_fortran": mesh() + ckpt_begin(True, 1, 9) +
        ckpt_add("t", F32, FORTRAN, [7, 5, 3], [2, 0, 0], [5, 5, 3], "") +
        ckpt_add("u", F64, C, [3], [0], [3], None) + commit() +
        ckpt_begin(False, strict=0) + ckpt_add("t", F32, FORTRAN, [7, 5, 3], [2, 0, 0], [5, 5, 3], "") + commit(),
    # Scatter / gather through the decomposition and through a halo (padded 9 x 7).
    "scatter_gather": mesh() + decomp(5, 7) + scatter_gather(0, F64, C, [2, 5, 7]) +
        scatter_gather(1, F32, FORTRAN, [7, 5]) + halo(2, 2, 0, 0, 0, 1) +
        scatter_gather(2, F64, C, [9, 7]) + scatter_gather(3, F64, C, [3, 9, 7]),
    # The YAML path of the mesh, then a decomposition over it.
    "mesh_from_file": mesh_file("parallelism: {data: none, tensor: 1, domain: 1}") + decomp(3, 3) +
        halo(1, 1, 1, 1) + add_field(F32, C, [5, 5]) + exchange(0),
    # Edge values: extents, widths and grids near the int / int64 limits.
    "edges": mesh(0, "INT_MAX", 2) + mesh(0, -1, -1) + mesh() +
        decomp("INT64_MAX", 2) + decomp("3037000500", "3037000500") + decomp(4, 4, -1, -1) +
        decomp(4, 4) + halo("INT_MAX", 0, 0, 0) + halo(1, 1, 1, 1) +
        add_field(F64, C, ["2^62", 6, 6]) + add_field(F64, C, [0, 6, 6]) +
        add_strided(F64, [6, 6], ["INT64_MAX", 1]) + exchange(0) +
        ckpt_begin(True, 0, "INT64_MAX") + ckpt_add("a", F32, C, ["INT64_MAX", 4], [0, 0], [1, 4]) +
        ckpt_add("c", F32, C, [4], ["INT64_MAX"], [1]) + commit(),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_capi_shapes")
    write_files(out, {name + ".bin": data for name, data in SEEDS.items()})


if __name__ == "__main__":
    main()
