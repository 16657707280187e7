#!/usr/bin/env python3
"""Writes the structured seeds of fuzz_checkpoint_reader (fuzz/corpus/fuzz_checkpoint_reader/*.bin).

    fuzz/make_checkpoint_reader_seeds.py [output dir]

A structured input describes a checkpoint that the harness writes with the HDF5 API
(fuzz/fuzz_checkpoint_reader.cpp, write_structured): the bytes are read in this order

  per_rank bit, [rank-file bit], the root attributes (format ... writer_ranks), then for
  /model and /optimizer: the section kind, [the optimizer's type and step_count], the
  entry count, and per entry: name, kind, dataspace rank and extents, stored type,
  layout, [virtual source], [8 data pattern bytes], checksum, [right-checksum bit],
  dtype / placement / checksum attributes, [the slice's dtype / global_shape / offset /
  checksum attributes]; then the MANIFEST case (0 or no byte: it lists every file; 1: no
  MANIFEST; 2, k: file k left out; 3, position (2 bytes), op[, byte]: one edit, op < 0x40
  a cut at the position, < 0x80 a whitespace byte there, else the next byte).

An attribute selector byte below 0x90 means "as the library writes it". These seeds are
valid checkpoints of both layouts; the fuzzer mutates them into hostile ones. (The raw
.h5 seeds beside them come from fuzz_make_checkpoint_seeds.)
"""
import os
import sys

from seed_files import write_files

GOOD = 0x00  # attribute selector: as the library writes it

F32, F64, BF16, I64 = 0, 2, 3, 4  # stored_type selectors
CONTIGUOUS, CHUNKED, COMPACT, VIRTUAL = 0, 1, 3, 4
NAMES = ["fc.weight", "fc.bias", "w", "layers.0.weight.exp_avg"]


def entry(name, dims, dtype=F32, layout=CONTIGUOUS, virtual_to_rank_file=True, slice_=False):
    b = bytes([NAMES.index(name), 0x00])        # name, kind: a dataset
    b += bytes([1 + (len(dims) - 1)])           # rank_sel: rank 1..4
    b += bytes(dims)                            # extents (< 7 each)
    b += bytes([dtype, layout])
    if layout == VIRTUAL:
        b += bytes([1 if virtual_to_rank_file else 0])
    numel = 1
    for d in dims:
        numel *= d
    if 0 < numel <= 4096:
        b += bytes([0x00, 0x00, 0x80, 0x3f, 0xcd, 0xcc, 0x4c, 0x3e])  # data pattern
        b += bytes([8])                         # checksum (overridden by the next bit)
        b += bytes([1])                         # use the right checksum
    else:
        b += bytes([8])
    b += bytes([GOOD, GOOD, GOOD])              # dtype, placement, checksum attributes
    if slice_:
        b += bytes([GOOD, GOOD, GOOD, GOOD])    # slice: dtype, global_shape, offset, checksum
    return b


def section(entries, ordered=True, optimizer=False):
    b = bytes([0x00 if ordered else 0xa0])
    if optimizer:
        b += bytes([GOOD, GOOD])                # type, step_count
    b += bytes([len(entries)])
    return b + b"".join(entries)


def checkpoint(model, optimizer, per_rank=False, rank_file=False):
    b = bytes([1 if per_rank else 0])
    if per_rank:
        b += bytes([1 if rank_file else 0])
    b += bytes([GOOD] * (13 if per_rank else 12))
    return b + model + optimizer


SEEDS = {
    "empty_shared": b"",
    "shared_model_optimizer": checkpoint(
        section([entry("fc.weight", [2, 3]), entry("fc.bias", [3], F64, CHUNKED)]),
        section([entry("layers.0.weight.exp_avg", [2, 3], F32, CHUNKED)], optimizer=True)),
    "shared_types": checkpoint(
        section([entry("w", [4], BF16), entry("fc.bias", [2, 2], I64, COMPACT), entry("fc.weight", [1, 2, 3, 1])],
                ordered=False),
        bytes([0xc0])),  # no optimizer section
    "per_rank_with_slices": checkpoint(
        section([entry("fc.weight", [2, 3], F32, VIRTUAL, True, slice_=True),
                 entry("w", [5], F64, VIRTUAL, True, slice_=True)]),
        section([], optimizer=True), per_rank=True, rank_file=True),
    "per_rank_missing_slices": checkpoint(
        section([entry("fc.weight", [3, 3], F32, VIRTUAL, False)]), bytes([0xc0]), per_rank=True),
}

# Issue 46: the same checkpoints with no MANIFEST, one that leaves a file out, one with a
# newline turned into \v and one cut to 68 bytes. The reader must refuse each before
# HDF5 opens anything, and verify must not pass what the reader refuses.
VERTICAL_TAB, CUT = 0x42, 0x00  # edit ops: "\v\t\f\r \n"[op % 6] for 0x40 <= op < 0x80; a cut below
SEEDS.update({
    "per_rank_no_manifest": SEEDS["per_rank_with_slices"] + bytes([1]),
    "per_rank_manifest_omits_index": SEEDS["per_rank_with_slices"] + bytes([2, 0]),
    "per_rank_manifest_omits_slice": SEEDS["per_rank_with_slices"] + bytes([2, 1]),
    "per_rank_manifest_newline_vt": SEEDS["per_rank_with_slices"] + bytes([3, 29, 0, VERTICAL_TAB]),
    "shared_manifest_cut_at_68": SEEDS["shared_model_optimizer"] + bytes([3, 68, 0, CUT]),
})


# Reproducers of the reported (and fixed) reader bugs (fuzz/findings/; docs/fuzzing.md,
# "Findings"): arrays where the format has a scalar.
INT_ARRAY = bytes([0x95, 2, 0x09, 0x09, 0x00])      # an int64 array attribute [1, 1]
STRING_ARRAY = bytes([0x98, 0x00, 0x00, 0x01])      # a variable-length string array of 2
FIXED_STRING_ARRAY = bytes([0x98, 0x01])            # a fixed-length (8) string array of 2


def header(format_attr=bytes([GOOD]), format_version=bytes([GOOD])):
    return bytes([0]) + format_attr + format_version + bytes([GOOD] * 10)


FINDINGS = {
    # format_version (read_int_attribute) is an array: stack-buffer-overflow.
    "fuzz_checkpoint_reader-int-attribute-array": header(format_version=INT_ARRAY) + bytes([0xc0, 0xc0]),
    # a dataset's checksum (read_uint_attribute) is an array: stack-buffer-overflow.
    "fuzz_checkpoint_reader-uint-attribute-array":
        header() + section([entry("fc.weight", [2, 3])[:-3] + bytes([GOOD, GOOD]) + INT_ARRAY]) + bytes([0xc0]),
    # format (read_string_attribute) is an array of two variable-length strings:
    # stack-buffer-overflow (two char* written into one).
    "fuzz_checkpoint_reader-string-attribute-array": header(format_attr=STRING_ARRAY) + bytes([0xc0, 0xc0]),
    # format is an array of two fixed-length strings: heap-buffer-overflow of the
    # std::string sized for one.
    "fuzz_checkpoint_reader-fixed-string-attribute-array":
        header(format_attr=FIXED_STRING_ARRAY) + bytes([0xc0, 0xc0]),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus",
                                                             "fuzz_checkpoint_reader")
    write_files(out, {name + ".bin": data for name, data in SEEDS.items()})
    write_files(os.path.join(os.path.dirname(os.path.abspath(__file__)), "findings"), FINDINGS)


if __name__ == "__main__":
    main()
