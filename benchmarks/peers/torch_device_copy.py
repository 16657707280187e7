#!/usr/bin/python3
"""PyTorch's device-to-device copy of a number of bytes: the reference bench_halo
--device=cuda's halo exchange is put beside (its vs_d2d counter measures tessera's own
Tensor::copy_from; this is the same bytes through torch's copy_, which a contiguous
same-device copy turns into one cudaMemcpyAsync).

    torch_device_copy.py --bytes 1,92160 [--min-time 0.5] [--min-iters 20] [--device cuda]

One process, GPU 0 (or --device cuda:N). Each timed copy: synchronise, start the clock,
dst.copy_(src) of a contiguous fp32 buffer, synchronise, stop the clock; copies repeat
until --min-time seconds of timed copies and at least --min-iters copies, after
--warmup untimed ones. Prints one JSON object on stdout: {"copies": [{"bytes",
"us_per_copy" (mean), "median_us", "GBps" (bytes / mean time)}, ...], "device", "torch"};
without CUDA an {"error": ...} object and exit status 3.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", required=True, help="comma-separated byte counts (rounded up to whole floats)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--min-iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"peer": "torch_device_copy", "error": "PyTorch is not installed for " + sys.executable}))
        return 3
    if not torch.cuda.is_available():
        print(json.dumps({"peer": "torch_device_copy",
                          "error": f"torch {torch.__version__} sees no CUDA device: a device copy needs one"}))
        return 3
    device = torch.device(args.device)
    if device.index is None:  # torch.cuda.set_device wants an index (PyTorch 2.11: "cuda" is refused)
        device = torch.device(device.type, torch.cuda.current_device())
    torch.cuda.set_device(device)
    copies = []
    for nbytes in (int(b) for b in args.bytes.split(",")):
        floats = max(1, (nbytes + 3) // 4)
        src = torch.rand(floats, device=device)
        dst = torch.empty_like(src)
        for _ in range(args.warmup):
            dst.copy_(src)
        times = []
        while sum(times) < args.min_time or len(times) < args.min_iters:
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            dst.copy_(src)
            torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        mean = statistics.fmean(times)
        copies.append({"bytes": 4 * floats, "iterations": len(times), "us_per_copy": 1e6 * mean,
                       "median_us": 1e6 * statistics.median(times), "GBps": 4 * floats / mean / 1e9})
    print(json.dumps({"peer": "torch_device_copy", "torch": torch.__version__,
                      "device": f"{device} ({torch.cuda.get_device_name(device)})", "copies": copies}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
