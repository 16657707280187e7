#!/usr/bin/python3
"""PyTorch's nn.Embedding options against tessera's serial and tensor-parallel embeddings.

For each case (padding_idx, max_norm with norm_type 2, 1, 3, inf, -inf and 0,
scale_grad_by_freq, all together; f32 and f64), torch.nn.Embedding runs a few steps of
forward, backward and a plain SGD update from a fixed table, and this script writes the
table, ids, output gradients and torch's outputs, renormalised tables and gradients to a
case file. embedding_torch_parity then replays every case on nn::Embedding,
ParallelEmbedding and VocabParallelEmbedding at 1, 2 and 4 ranks and compares.

    /usr/bin/python3 check_embedding_torch.py PARITY WORKDIR MPIEXEC NP_FLAG [PREFLAGS...]

Exits 77 (CTest: skipped) when torch cannot be imported, 1 on any failure.
"""

import math
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)

VOCAB, DIM = 8, 8
IDS = [[3, 0, 7, 3, 6], [1, 3, 2, 6, 4]]  # repeats (3 three times, 6 twice), 5 absent
LR = 0.5

# name, dtype, steps, nn.Embedding keyword arguments
CASES = [
    ("padding", torch.float64, 2, dict(padding_idx=2)),
    ("padding_negative", torch.float32, 1, dict(padding_idx=-1)),
    ("max_norm_l2", torch.float64, 3, dict(max_norm=1.0)),
    ("max_norm_l2_f32", torch.float32, 3, dict(max_norm=1.0)),
    ("max_norm_l1", torch.float64, 2, dict(max_norm=2.5, norm_type=1.0)),
    ("max_norm_l3", torch.float32, 2, dict(max_norm=0.8, norm_type=3.0)),
    ("max_norm_inf", torch.float64, 2, dict(max_norm=0.6, norm_type=math.inf)),
    ("max_norm_minus_inf", torch.float64, 2, dict(max_norm=0.05, norm_type=-math.inf)),
    ("max_norm_l0", torch.float64, 1, dict(max_norm=7.0, norm_type=0.0)),
    ("scale_grad_by_freq", torch.float64, 2, dict(scale_grad_by_freq=True)),
    ("scale_grad_by_freq_padding", torch.float32, 2, dict(scale_grad_by_freq=True, padding_idx=6)),
    ("all", torch.float32, 3, dict(padding_idx=0, max_norm=1.2, scale_grad_by_freq=True)),
    ("all_f64", torch.float64, 3, dict(padding_idx=-8, max_norm=1.2, norm_type=2.0, scale_grad_by_freq=True)),
]


def table(dtype):
    """Rows of very different norms (row r scaled by 0.25 (r + 1)); rows 0 and 1 hold
    two exact zeros, so norm_type 0 (a count) and -inf (a minimum) leave them alone."""
    g = torch.Generator().manual_seed(1234)
    w = (torch.rand(VOCAB, DIM, generator=g, dtype=torch.float64) * 2 - 1)
    w *= 0.25 * torch.arange(1, VOCAB + 1, dtype=torch.float64)[:, None]
    w[:2, :2] = 0
    return w.to(dtype)


def numbers(t):
    return " ".join(repr(float(x)) for x in t.detach().reshape(-1).tolist())


def check_case_bites(name, kwargs, before, emb):
    """A case that would pass with the option ignored proves nothing: max_norm must
    rescale some looked-up rows and keep others; the padding row must be looked up and
    get no gradient while its neighbours do."""
    looked_up = sorted({i for row in IDS for i in row})
    if "max_norm" in kwargs:
        changed = [r for r in looked_up if not torch.equal(before[r], emb.weight[r].detach())]
        if not changed or len(changed) == len(looked_up):
            raise SystemExit(f"case {name}: max_norm rescales rows {changed} of {looked_up}; pick another max_norm")
    if "padding_idx" in kwargs:
        p = kwargs["padding_idx"] % VOCAB
        if p not in looked_up or emb.weight.grad[p].abs().max() != 0:
            raise SystemExit(f"case {name}: padding row {p} is not looked up or got a gradient")


def write_case(path, name, dtype, steps, kwargs):
    emb = torch.nn.Embedding(VOCAB, DIM, dtype=dtype, **kwargs)
    w0 = table(dtype)
    with torch.no_grad():
        emb.weight.copy_(w0)  # the padding row too: its lookups return it, it gets no gradient
    ids = torch.tensor(IDS, dtype=torch.int64)
    g = torch.Generator().manual_seed(99)
    lines = [
        f"name {name}",
        f"dtype {'f64' if dtype == torch.float64 else 'f32'}",
        f"padding_idx {kwargs.get('padding_idx', 'none')}",
        f"max_norm {kwargs.get('max_norm', 'none')}",
        f"norm_type {float(kwargs.get('norm_type', 2.0))!r}",
        f"scale_grad_by_freq {int(kwargs.get('scale_grad_by_freq', False))}",
        f"lr {LR!r}",
        f"ids {' '.join(str(i) for i in ids.reshape(-1).tolist())}",
        f"weight {numbers(w0)}",
        f"steps {steps}",
    ]
    for step in range(steps):
        dy = (torch.rand(2, 5, DIM, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
        emb.weight.grad = None
        before = emb.weight.detach().clone()
        y = emb(ids)
        y.backward(dy)
        if step == 0:
            check_case_bites(name, kwargs, before, emb)
        lines += [f"dy {numbers(dy)}", f"y {numbers(y)}", f"renormed {numbers(emb.weight)}",
                  f"grad {numbers(emb.weight.grad)}"]
        with torch.no_grad():
            emb.weight -= LR * emb.weight.grad
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parity, work = sys.argv[1], sys.argv[2]
    mpiexec, np_flag, preflags = sys.argv[3], sys.argv[4], sys.argv[5:]
    os.makedirs(work, exist_ok=True)
    files = []
    for name, dtype, steps, kwargs in CASES:
        path = os.path.join(work, name + ".txt")
        write_case(path, name, dtype, steps, kwargs)
        files.append(path)
    print(f"torch {torch.__version__}: {len(files)} cases in {work}")
    failed = False
    for n in (1, 2, 4):
        command = [mpiexec, np_flag, str(n), *preflags, parity, *files]
        print("$", " ".join(command), flush=True)
        proc = subprocess.run(command, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.write(proc.stderr)
        if proc.returncode != 0:
            print(f"FAIL at {n} ranks: exit {proc.returncode}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
