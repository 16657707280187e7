#!/usr/bin/python3
"""From PyTorch to tessera and back (docs/pytorch.md), for the field emulator and the
decoder of torch_models.py:

1. PyTorch models with seeded random weights; the emulator saved with torch.save (.pt)
   and converted by scripts/pt-to-safetensors, the decoder written as safetensors.
2. tessera-ckpt import with the mappings (renames, a fused qkv split, a transposed head)
   and the model descriptions emulator_model.yaml / decoder_model.yaml.
3. pytorch_parity at tp 1/2 x domain 1/2 (emulator) and tp 1/2 (decoder): tessera's
   outputs equal PyTorch's within fp32 rounding.
4. tessera-ckpt export with the same mappings: PyTorch's load_state_dict(strict=True)
   accepts the file and every tensor comes back bit for bit.

    /usr/bin/python3 check_pytorch.py TESSERA_CKPT PYTORCH_PARITY REPO WORKDIR MPIEXEC NP_FLAG [PREFLAGS...]

With --gqa, the current decoder instead (rotary embeddings, grouped-query attention):
PyTorch's logits and every weight gradient of a random logits gradient, computed in
float64 from float32 weights, against decoder_gqa_parity (tests/models) at tp 1, 2 and 4
with split and repeated key/value heads, with and without sequence parallelism:

    /usr/bin/python3 check_pytorch.py --gqa DECODER_GQA_PARITY WORKDIR MPIEXEC NP_FLAG [PREFLAGS...]

N ranks are launched as `MPIEXEC NP_FLAG N PREFLAGS... program` (CMake's MPIEXEC_*). Exits 77
(CTest: skipped) when torch cannot be imported, 1 on any failure.
"""

import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable, "(the safetensors path is tested without it)")
    sys.exit(77)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_numpy as st  # noqa: E402
import torch_models  # noqa: E402

# The bound of pytorch_parity: |out - exact| <= TOLERANCE * max(1, max |exact|).
TOLERANCE = 1e-5
FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL", message)


def run(command, expect=0):
    print("$", " ".join(command))
    proc = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != expect:
        fail(f"{' '.join(command)}: exit {proc.returncode}, expected {expect}\n{proc.stderr}")
    return proc


def model_numbers(path):
    """The `key: value` lines under `model:` of a metadata file, as Python values."""
    out = {}
    with open(path) as f:
        for line in f:
            text = line.split("#", 1)[0].strip()
            if ":" not in text or text == "model:":
                continue
            key, value = (s.strip() for s in text.split(":", 1))
            for convert in (int, float):
                try:
                    value = convert(value)
                    break
                except ValueError:
                    pass
            out[key] = value
    return out


def numpy_state(model):
    return {name: t.detach().numpy() for name, t in model.state_dict().items()}


def check_bound(what, got, exact):
    diff = float((got.double() - exact).abs().max())
    bound = TOLERANCE * max(1.0, float(exact.abs().max()))
    print(f"{what}: max |pytorch f32 - f64| = {diff:.3g} (bound {bound:.3g})")
    if not diff <= bound:
        fail(f"{what}: PyTorch's own f32 result is {diff} from float64, over the bound {bound}")


def export_and_reload(tool, checkpoint, mapping, out, fresh, original, check_output):
    """export -> load_state_dict(strict=True) -> identical tensors and outputs."""
    run([tool, "export", checkpoint, out, "--format", "safetensors", "--mapping", mapping])
    tensors, metadata = st.load(out)
    if metadata.get("format") != "pt":
        fail(f"{out}: __metadata__ {metadata}")
    state = {name: torch.from_numpy(array.copy()) for name, array in tensors.items()}
    try:
        fresh.load_state_dict(state, strict=True)
    except RuntimeError as e:
        fail(f"{out}: load_state_dict(strict=True) refused it: {e}")
        return
    for name, want in original.state_dict().items():
        got = fresh.state_dict()[name]
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            fail(f"{out}: '{name}' did not come back bit for bit")
    with torch.no_grad():
        if not check_output(fresh):
            fail(f"{out}: the reloaded model's outputs differ")
    print(f"export: {out}: load_state_dict(strict=True) accepted {len(state)} tensors, all bit for bit")


def check_gqa(parity, work, mpiexec, np_flag, preflags):
    """The current decoder against PyTorch, forward and backward, at tp 1/2/4."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    generator = torch.Generator().manual_seed(22)
    torch.manual_seed(22)
    vocab, hidden, n_layers, eps, seq = 16, 32, 2, 1e-6, 8
    # (d_model, n_heads, n_kv_heads, rope_theta): split at tp 2 and repeated at tp 4;
    # multi-query (repeated at tp 2 and 4) without RoPE; RoPE alone; 6 query heads on 3
    # key/value heads (at tp 2 neither divides the other).
    for d_model, n_heads, n_kv_heads, theta in ((16, 4, 2, 10000.0), (16, 4, 1, None), (16, 4, 4, 50.0),
                                                (12, 6, 3, 100.0)):
        model = torch_models.Decoder(vocab, d_model, n_heads, hidden, n_layers, eps, n_kv_heads, theta)
        torch_models.perturb_norms(model, generator)
        ids = torch.randint(0, vocab, (2, seq), generator=generator)
        names = torch_models.tessera_names(model)
        model.double()
        logits = model(ids)
        dlogits = torch.randn(logits.shape, generator=generator, dtype=torch.float64)
        (logits * dlogits).sum().backward()
        tensors = {"ids": ids.numpy(), "logits": logits.detach().float().numpy(), "dlogits": dlogits.float().numpy()}
        for name, p in names.items():
            value, grad = p.detach(), p.grad
            if name == "head.weight":  # PyTorch's head is [d_model, vocab]; tessera's Linear [vocab, d_model]
                value, grad = value.t(), grad.t()
            tensors["weight/" + name] = value.float().numpy()
            tensors["grad/" + name] = grad.float().numpy()
        io = os.path.join(work, f"decoder_h{n_heads}_kv{n_kv_heads}.safetensors")
        metadata = {"vocab": vocab, "d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads,
                    "hidden": hidden, "n_layers": n_layers, "eps": repr(eps), "rope_theta": repr(theta or 0.0)}
        st.save(io, tensors, {k: str(v) for k, v in metadata.items()})
        for tp, sp in ((1, 0), (2, 0), (2, 1), (4, 0), (4, 1)):
            if n_heads % tp != 0:
                continue
            run([mpiexec, np_flag, str(tp), *preflags, parity, io, str(sp)])
    print("pytorch check (current decoder):", "FAILED" if FAILURES else "passed")
    return 1 if FAILURES else 0


def main():
    if sys.argv[1] == "--gqa":
        return check_gqa(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    tool, parity, repo, work = sys.argv[1:5]
    mpiexec, np_flag, preflags = sys.argv[5], sys.argv[6], sys.argv[7:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    generator = torch.Generator().manual_seed(20)
    torch.manual_seed(20)

    def launch(n, *args):
        run([mpiexec, np_flag, str(n), *preflags, parity, *args])

    # ---- Field emulator: .pt -> safetensors -> tessera.
    e = model_numbers(os.path.join(HERE, "emulator_model.yaml"))
    emulator = torch_models.FieldEmulator(e["channels"], e["width"], e["mlp_hidden"], e["blocks"], e["kernel"])
    pt = os.path.join(work, "emulator.pt")
    torch.save(emulator.state_dict(), pt)
    emulator_st = os.path.join(work, "emulator.safetensors")
    run([sys.executable, os.path.join(repo, "scripts", "pt-to-safetensors"), pt, emulator_st])
    x = torch.randn(2, e["channels"], e["nlat"], e["nlon"], generator=generator)
    with torch.no_grad():
        exact = emulator.double()(x.double())
        emulator.float()
        check_bound("emulator", emulator(x), exact)
    emulator_io = os.path.join(work, "emulator_io.safetensors")
    st.save(emulator_io, {"input": x.numpy(), "output": exact.float().numpy()})
    emulator_ckpt = os.path.join(work, "emulator_ckpt")
    emulator_map = os.path.join(HERE, "emulator_mapping.yaml")
    run([tool, "import", emulator_st, emulator_ckpt, "--mapping", emulator_map,
         "--metadata", os.path.join(HERE, "emulator_model.yaml")])
    for tp, domain in ((1, 1), (2, 1), (1, 2), (2, 2)):
        launch(tp * domain, "emulator", emulator_ckpt, emulator_io, str(tp), str(domain))

    # ---- Decoder: safetensors written directly -> tessera.
    d = model_numbers(os.path.join(HERE, "decoder_model.yaml"))
    decoder = torch_models.Decoder(d["vocab"], d["d_model"], d["n_heads"], d["hidden"], d["n_layers"], d["eps"])
    torch_models.perturb_norms(decoder, generator)
    decoder_st = os.path.join(work, "decoder.safetensors")
    st.save(decoder_st, numpy_state(decoder))
    ids = torch.randint(0, d["vocab"], (2, 8), generator=generator)
    with torch.no_grad():
        logits = decoder.double()(ids)
        decoder.float()
        check_bound("decoder", decoder(ids), logits)
    decoder_io = os.path.join(work, "decoder_io.safetensors")
    st.save(decoder_io, {"ids": ids.numpy(), "logits": logits.float().numpy()})
    decoder_ckpt = os.path.join(work, "decoder_ckpt")
    decoder_map = os.path.join(HERE, "decoder_mapping.yaml")
    run([tool, "import", decoder_st, decoder_ckpt, "--mapping", decoder_map,
         "--metadata", os.path.join(HERE, "decoder_model.yaml")])
    for tp in (1, 2):
        launch(tp, "decoder", decoder_ckpt, decoder_io, str(tp), "1")

    # ---- And back: export with the same mappings, load_state_dict(strict=True).
    fresh = torch_models.FieldEmulator(e["channels"], e["width"], e["mlp_hidden"], e["blocks"], e["kernel"])
    export_and_reload(tool, emulator_ckpt, emulator_map, os.path.join(work, "emulator_out.safetensors"), fresh,
                      emulator, lambda m: torch.equal(m(x), emulator(x)))
    fresh = torch_models.Decoder(d["vocab"], d["d_model"], d["n_heads"], d["hidden"], d["n_layers"], d["eps"])
    export_and_reload(tool, decoder_ckpt, decoder_map, os.path.join(work, "decoder_out.safetensors"), fresh,
                      decoder, lambda m: torch.equal(m(ids), decoder(ids)))

    print("pytorch check:", "FAILED" if FAILURES else "passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
