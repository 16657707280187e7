"""safetensors with numpy alone: an independent reader (and a writer for test inputs)
that the tests use to check what tessera-ckpt writes and to make the files it reads.

    header = read_header(path)           # {"name": {"dtype", "shape", "data_offsets"}, ...}
    tensors, metadata = load(path)       # {"name": numpy array}; BF16 as its uint16 bits
    save(path, tensors, metadata)        # tensors: {"name": array} or [(name, array)];
                                         # a ("BF16", uint16 bits) pair stores bf16

The layout (8-byte little-endian header length, JSON header, raw little-endian data)
is the one include/tessera/io/safetensors.hpp describes.
"""

import json
import struct

import numpy as np

DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
NAMES = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64",
         np.dtype("<i4"): "I32", np.dtype("<i2"): "I16", np.dtype("i1"): "I8", np.dtype("u1"): "U8",
         np.dtype("<u2"): "U16", np.dtype("<u4"): "U32", np.dtype("<u8"): "U64", np.dtype("?"): "BOOL"}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n))


def load(path):
    n, header = read_header(path)
    metadata = header.pop("__metadata__", {})
    with open(path, "rb") as f:
        f.seek(8 + n)
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
    return tensors, metadata


def save(path, tensors, metadata=None):
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, value in items:
        if isinstance(value, tuple):  # ("BF16", uint16 bits)
            kind, array = value
        else:
            array = np.asarray(value)
            kind = NAMES[array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype]
        blob = np.ascontiguousarray(array, dtype=DTYPES[kind]).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)
