#!/usr/bin/python3
"""The peers of bench_checkpoint's save: torch.save and h5py writing the same blocks, and
the disk's own speed for those bytes (raw).

    checkpoint_peers.py --writer torch|h5py|raw --ranks 2 --size-mb 64 --dir DIR
                        [--min-time 2] [--min-iters 3] [--op save|load] [--device cpu|cuda]

The model is bench_checkpoint's: a column-parallel Linear(H, H) then a row-parallel
Linear(H, H) over tp = --ranks, H chosen (as bench_checkpoint does) so that the master
weights hold about --size-mb MiB of f32. Each rank writes the blocks it owns (its column
weight and bias shards, its row weight shard; rank 0 also the replicated row bias) to a
file of its own, then fsyncs the file and its directory:

  torch: torch.save of a dict of the rank's tensors (PyTorch's checkpoint format)
  h5py:  one HDF5 file per rank, one dataset per tensor (no chunking, no compression)
  raw:   the tensors' bytes back to back in one contiguous file per rank, os.write in
         8 MiB blocks, no header and no checksum: what the disk itself costs, the floor
         under every writer (tessera's time / raw's is how far above the disk it is)

--op load (torch only): each rank writes its file once, untimed, then times torch.load
of it (map_location: the rank's device), as bench_checkpoint's load reads a checkpoint it
has just written. --device cuda (torch only; bench_checkpoint --device=cuda's peer): the
rank's tensors live on GPU rank % visible GPUs, torch.save copies them to the host and
torch.load back to the device, and the GPU is synchronised before the clock stops;
without CUDA it prints an error object and exits 3.

One process per rank on this machine, one thread each. Timing follows tessera's
benchmarks: every iteration removes the previous files (untimed), then all ranks pass a
barrier, each times its write + fsync, and the iteration's time is the slowest rank's.
Prints one JSON object: {"writer", "op", "device", "ranks", "size_mb", "hidden", "bytes",
"iterations", "ms_per_save" or "ms_per_load" (mean), "median_ms", "min_ms"}.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time


def hidden_for(size_mb, tp):
    # bench_checkpoint's make_model: H a multiple of 16 tp with 2 H^2 f32 ~ size_mb MiB.
    elements = size_mb * (1 << 20) / 4.0 / 2.0
    unit = 16 * tp
    return max(unit, int(math.sqrt(elements) / unit) * unit)


def rank_blocks(h, tp, rank):
    """name -> shape of the blocks this rank writes (main replicas only)."""
    blocks = {
        "0.weight": (h // tp, h),  # column weight, sharded along dim 0
        "0.bias": (h // tp,),      # column bias, sharded with it
        "1.weight": (h, h // tp),  # row weight, sharded along dim 1
    }
    if rank == 0:
        blocks["1.bias"] = (h,)    # row bias, replicated: written once
    return blocks


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# raw's write size: large enough that the system call count does not matter.
RAW_BLOCK = 8 << 20


def write_raw(path, arrays):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for a in arrays:
            view = memoryview(a).cast("B")
            for start in range(0, len(view), RAW_BLOCK):
                chunk = view[start:start + RAW_BLOCK]
                while chunk:
                    chunk = chunk[os.write(fd, chunk):]  # a short write goes on from where it stopped
        os.fsync(fd)
    finally:
        os.close(fd)


EXTENSION = {"torch": "pt", "h5py": "h5", "raw": "bin"}


def worker(rank, args, barrier, times, stop):
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np

    tp = args.ranks
    h = hidden_for(args.size_mb, tp)
    rng = np.random.default_rng(1 + rank)
    arrays = {name: rng.random(shape, dtype=np.float32) for name, shape in rank_blocks(h, tp, rank).items()}
    if args.writer == "torch":
        import torch

        torch.set_num_threads(1)
        device = torch.device("cpu")
        if args.device == "cuda":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        tensors = {name: torch.from_numpy(a).to(device) for name, a in arrays.items()}

        def write(path):
            with open(path, "wb") as f:
                torch.save(tensors, f)
                f.flush()
                os.fsync(f.fileno())

        def read(path):
            loaded = torch.load(path, map_location=device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return loaded
    elif args.writer == "raw":
        def write(path):
            write_raw(path, arrays.values())
    else:
        import h5py

        def write(path):
            with h5py.File(path, "w") as f:
                for name, a in arrays.items():
                    f.create_dataset(name, data=a)
            fsync_path(path)

    directory = os.path.join(args.dir, f"{args.writer}_np{tp}")
    path = os.path.join(directory, f"rank{rank}.{EXTENSION[args.writer]}")

    def fresh_directory():
        if rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)

    if args.op == "load":  # untimed: the file every iteration reads
        fresh_directory()
        barrier.wait()
        write(path)
        fsync_path(directory)
    iteration = 0
    while True:
        # Untimed: a fresh directory for this iteration's save.
        if args.op == "save":
            fresh_directory()
        barrier.wait()
        if stop.value:
            break
        t0 = time.perf_counter()
        if args.op == "save":
            write(path)
            fsync_path(directory)
        else:
            read(path)
        times[rank] = time.perf_counter() - t0
        barrier.wait()
        if rank == 0:
            iteration += 1
            worst = max(times[:tp])
            times[tp + iteration - 1] = worst
            done = iteration >= args.warmup + args.min_iters and \
                sum(times[tp + args.warmup:tp + iteration]) >= args.min_time
            if done or iteration >= args.max_iters:
                stop.value = 1
                times[tp + args.max_iters] = iteration
        barrier.wait()
    if rank == 0:
        shutil.rmtree(directory, ignore_errors=True)



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writer", choices=["torch", "h5py", "raw"], required=True)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--dir", default="bench_checkpoint_peers")
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--max-iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--op", choices=["save", "load"], default="save")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    try:
        import numpy  # noqa: F401
        __import__({"torch": "torch", "h5py": "h5py", "raw": "numpy"}[args.writer])
    except ImportError as e:
        print(json.dumps({"writer": args.writer, "error": f"{e.name} is not installed for {sys.executable}"}))
        return 3
    if args.writer != "torch" and (args.op != "save" or args.device != "cpu"):
        print(json.dumps({"writer": args.writer, "error": "--op load and --device cuda are torch's only"}))
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(json.dumps({"writer": args.writer,
                              "error": f"--device cuda: torch {torch.__version__} sees no CUDA device"}))
            return 3
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.ranks)
    times = ctx.Array("d", args.ranks + args.max_iters + 1, lock=False)
    stop = ctx.Value("i", 0, lock=False)
    procs = [ctx.Process(target=worker, args=(r, args, barrier, times, stop)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        print(json.dumps({"writer": args.writer, "error": "a rank failed"}))
        return 1
    iterations = int(times[args.ranks + args.max_iters])
    timed = list(times[args.ranks + args.warmup:args.ranks + iterations])
    h = hidden_for(args.size_mb, args.ranks)
    print(json.dumps({
        "writer": args.writer,
        "op": args.op,
        "device": args.device,
        "ranks": args.ranks,
        "size_mb": args.size_mb,
        "hidden": h,
        "bytes": 4 * (2 * h * h + 2 * h),
        "iterations": len(timed),
        f"ms_per_{args.op}": 1e3 * statistics.fmean(timed),
        "median_ms": 1e3 * statistics.median(timed),
        "min_ms": 1e3 * min(timed),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
