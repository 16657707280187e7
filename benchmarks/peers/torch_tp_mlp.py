#!/usr/bin/python3
"""PyTorch's side of bench_tp_mlp: the same column -> GELU -> row tensor-parallel MLP
(Megatron's partition rules, written out with torch.distributed), forward + backward,
tokens x hidden, MLP width 4 x hidden, fp32, one thread per rank.

    torch_tp_mlp.py --ranks 2 [--hidden 1024] [--tokens 512] [--min-time 2] [--warmup 2]
                    [--device cpu|cuda] [--dtype fp32|bf16] [--backend auto|gloo|nccl]

Spawns --ranks processes on this machine (the process group's rendezvous over TCP on
127.0.0.1). Timing follows tessera's benchmarks: barrier, time one step, all-reduce MAX
of the elapsed time over ranks; steps repeat until --min-time seconds of timed steps and
at least --min-iters steps. Prints one JSON object on stdout: {"ms_per_step": mean,
"median_ms": ..., "iterations": n, ...}.

--device cuda (bench_tp_mlp --device=cuda's peer): rank r on GPU r % visible GPUs, the
tensors there, TF32 off (torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 are
False: fp32 GEMMs in full fp32, as tessera's cuBLAS calls), the GPU synchronised before
the barrier and before the clock stops. The backend (--backend auto): NCCL when every
rank has a GPU of its own; gloo when ranks share one, since NCCL refuses two ranks on one
device ("Duplicate GPU detected") - gloo all-reduces CUDA tensors by staging them through
host memory, which is what tessera's shared-GPU fallback does with MPI, so the 2-ranks-
on-1-GPU pair compares like with like. Without CUDA it prints an error object and exits 3.

--dtype bf16 (bench_tp_mlp's tp_mlp_bf16_mixed peer): the step under torch.autocast with
bfloat16: GEMMs on bf16 copies of fp32 weights and activations, fp32 parameters and
gradients.

The step, per rank (tp = ranks, F = 4 x hidden / tp):
  column: x [tokens, hidden] (replicated; its gradient is all-reduced in backward)
          h = x W1^T + b1        W1 [F, hidden], b1 [F]   (torch.nn.functional.linear)
          a = gelu(h)            exact (erf) GELU, torch's default
  row:    p = a W2^T             W2 [hidden, F]
          y = all_reduce(p) + b2 b2 [hidden], replicated
  backward from dy = x (as bench_tp_mlp): dW1, db1, dW2, db2 and dx.
Gradients are set to None before each step (PyTorch's cheapest zero_grad: autograd then
hands its fresh gradient tensors over instead of adding into old ones).
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, queue):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    tp = args.ranks
    h, n = args.hidden, args.tokens
    f = 4 * h // tp
    if 4 * h % tp:
        raise SystemExit(f"torch_tp_mlp: 4 x hidden = {4 * h} does not divide by {tp} ranks")

    class CopyToParallel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            if tp > 1:
                g = g.clone()
                dist.all_reduce(g)
            return g

    class ReduceFromParallel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if tp > 1:
                dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    gen = torch.Generator().manual_seed(1 + rank)
    bound1, bound2 = 1.0 / h ** 0.5, 1.0 / (4 * h) ** 0.5

    def leaf(t):  # drawn on the host (the same values on every device), then moved
        return t.to(device).requires_grad_()

    w1 = leaf((torch.rand(f, h, generator=gen) * 2 - 1) * bound1)
    b1 = leaf((torch.rand(f, generator=gen) * 2 - 1) * bound1)
    w2 = leaf((torch.rand(h, f, generator=gen) * 2 - 1) * bound2)
    b2 = leaf((torch.rand(h, generator=torch.Generator().manual_seed(1)) * 2 - 1) * bound2)
    # The input pattern of bench_tp_mlp; dy = x.
    idx = torch.arange(n * h, dtype=torch.int64)
    x = leaf((((idx * 7919) % 1000).to(torch.float32) / 1000.0 - 0.5).reshape(n, h))
    dy = x.detach().clone()
    params = [w1, b1, w2, b2, x]
    fn = torch.nn.functional
    # bf16: autocast's GEMMs on bf16 copies; fp32: a context that does nothing.
    precision = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step():
        for p in params:
            p.grad = None
        with precision:
            hid = fn.linear(CopyToParallel.apply(x), w1, b1)
            y = ReduceFromParallel.apply(fn.linear(fn.gelu(hid), w2)) + b2
        y.backward(dy.to(y.dtype))

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed():
        synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        step()
        synchronize()
        # NCCL reduces device tensors only.
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                         device=device if args.backend == "nccl" else "cpu")
        if tp > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    for _ in range(args.warmup):
        timed()
    times = []
    while sum(times) < args.min_time or len(times) < args.min_iters:
        times.append(timed())
    if rank == 0:
        queue.put({
            "peer": "pytorch",
            "torch": torch.__version__,
            "backend": args.backend,
            "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
            "dtype": args.dtype,
            "ranks": tp,
            "hidden": h,
            "tokens": n,
            "threads_per_rank": torch.get_num_threads(),
            "iterations": len(times),
            "ms_per_step": 1e3 * statistics.fmean(times),
            "median_ms": 1e3 * statistics.median(times),
            "min_ms": 1e3 * min(times),
        })
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--min-iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print(json.dumps({"peer": "pytorch", "error": "PyTorch is not installed for " + sys.executable}))
        return 3
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"peer": "pytorch", "error": f"--device cuda: torch {torch.__version__} sees no CUDA device"}))
        return 3
    if args.backend == "auto":
        # NCCL needs a GPU per rank; ranks sharing one go through gloo's host staging.
        own_gpus = args.device == "cuda" and args.ranks <= torch.cuda.device_count()
        args.backend = "nccl" if own_gpus else "gloo"
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        print(json.dumps({"peer": "pytorch", "error": "a rank failed"}))
        return 1
    print(json.dumps(queue.get()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
