#!/usr/bin/python3
"""A Llama in Hugging Face's layout, into tessera and back (issue 43, docs/pytorch.md).

The model is written here in plain torch (no `transformers`): Hugging Face's state-dict
names (model.layers.N.self_attn.q_proj.weight, ...), its rotary pairing (feature i of a
head with feature i + head_dim/2, "rotate half"), grouped-query attention (4 query heads
on 2 key/value heads), rms_norm_eps 1e-5 and an untied lm_head stored [vocab, d_model].
Its logits are computed in float64 from the float32 weights.

    /usr/bin/python3 check_hf.py mapping TESSERA_CKPT PYTORCH_PARITY WORKDIR MPIEXEC NP_FLAG [PREFLAGS...]

1. tessera-ckpt import with a mapping whose q and k rules carry
   `rope_permute: half_to_interleaved` (tests/python/hf_llama_mapping.yaml) and the
   decoder metadata: pytorch_parity's logits at tp 1 and 2 equal torch's within 1e-5
   (relative to the largest logit);
2. the same import without the permutation gives logits that differ (pytorch_parity
   exits 1): the check can fail;
3. export with the mapping gives back every tensor of model.safetensors bit for bit;
4. metadata whose n_kv_heads, vocab, d_model, hidden, n_layers or tie_embeddings
   contradicts the tensors is refused at import, naming the key and the tensor; f64
   weights are refused naming --dtype f32, and load with it;
5. docs/pytorch.md shows the mapping's rules whole.

Exits 77 (CTest: skipped) when torch cannot be imported, 1 on any failure.
"""

import json
import math
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_numpy as st  # noqa: E402

FAILURES = []

# The tiny model (shared with hf_llama_model.yaml and hf_llama_mapping.yaml).
CONFIG = {"vocab_size": 32, "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 24, "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
          "tie_word_embeddings": False}


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


# ---- The reference: Hugging Face's Llama computation, written out in plain torch.

def hf_state(config, generator):
    """Seeded random float32 weights under Hugging Face's Llama names."""
    d, hidden, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = d // heads

    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
        return (torch.randn(*shape, generator=generator) * scale).float()

    def norm():
        return (1.0 + 0.2 * torch.randn(d, generator=generator)).float()

    state = {"model.embed_tokens.weight": w(vocab, d, scale=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = w(heads * head_dim, d)
        state[p + "self_attn.k_proj.weight"] = w(kv * head_dim, d)
        state[p + "self_attn.v_proj.weight"] = w(kv * head_dim, d)
        state[p + "self_attn.o_proj.weight"] = w(d, heads * head_dim)
        state[p + "mlp.gate_proj.weight"] = w(hidden, d)
        state[p + "mlp.up_proj.weight"] = w(hidden, d)
        state[p + "mlp.down_proj.weight"] = w(d, hidden)
        state[p + "input_layernorm.weight"] = norm()
        state[p + "post_attention_layernorm.weight"] = norm()
    state["model.norm.weight"] = norm()
    if not config["tie_word_embeddings"]:
        state["lm_head.weight"] = w(vocab, d)
    return state


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half_split(x, theta):
    """Rotary embeddings with the half-split pairing: feature i of a head turns with
    feature i + head_dim/2 by position * theta^(-2i/head_dim). x [B, heads, S, head_dim]."""
    seq, head_dim = x.shape[-2], x.shape[-1]
    half = head_dim // 2
    inverse_frequency = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / head_dim)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inverse_frequency[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def hf_logits(state, config, ids, dtype=torch.float64):
    s = {k: v.to(dtype) for k, v in state.items()}
    d, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    head_dim = d // heads
    batch, seq = ids.shape
    h = s["model.embed_tokens.weight"][ids]
    causal = torch.full((seq, seq), float("-inf"), dtype=dtype).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, s[p + "input_layernorm.weight"], eps)
        q = (x @ s[p + "self_attn.q_proj.weight"].T).view(batch, seq, heads, head_dim).transpose(1, 2)
        k = (x @ s[p + "self_attn.k_proj.weight"].T).view(batch, seq, kv, head_dim).transpose(1, 2)
        v = (x @ s[p + "self_attn.v_proj.weight"].T).view(batch, seq, kv, head_dim).transpose(1, 2)
        q, k = rotate_half_split(q, theta), rotate_half_split(k, theta)
        # Query head j reads key/value head j // (heads / kv).
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + causal
        attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, d)
        h = h + attended @ s[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, s[p + "post_attention_layernorm.weight"], eps)
        gate = x @ s[p + "mlp.gate_proj.weight"].T
        up = x @ s[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ s[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, s["model.norm.weight"], eps)
    head = s["model.embed_tokens.weight"] if config["tie_word_embeddings"] else s["lm_head.weight"]
    return h @ head.T


def write_model(work, name, config, seed):
    """model.safetensors in Hugging Face's layout, and the io file pytorch_parity reads."""
    generator = torch.Generator().manual_seed(seed)
    state = hf_state(config, generator)
    model = os.path.join(work, name + ".safetensors")
    st.save(model, [(k, v.numpy()) for k, v in state.items()], {"format": "pt"})
    ids = torch.randint(0, config["vocab_size"], (2, 8), generator=generator)
    exact = hf_logits(state, config, ids)
    f32 = hf_logits(state, config, ids, torch.float32)
    diff = float((f32.double() - exact).abs().max())
    print(f"{name}: torch f32 against f64 logits: {diff:.3g} (largest logit {float(exact.abs().max()):.3g})")
    io = os.path.join(work, name + "_io.safetensors")
    st.save(io, {"ids": ids.numpy(), "logits": exact.float().numpy()})
    return model, io, state


def same_tensors(a, b, what):
    """Every tensor of safetensors file a is in b with the same name, dtype, shape and bytes."""
    ta, _ = st.load(a)
    tb, _ = st.load(b)
    if sorted(ta) != sorted(tb):
        fail(f"{what}: names differ: {sorted(set(ta) ^ set(tb))}")
        return
    for name, x in ta.items():
        y = tb[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            fail(f"{what}: '{name}' differs ({x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)})")
    print(f"{what}: {len(ta)} tensors bit for bit")


def check_mapping(tool, parity, work, launch):
    """Item 1-3 of the docstring: rope_permute in a mapping file."""
    model, io, _ = write_model(work, "hf_llama", CONFIG, 43)
    mapping = os.path.join(HERE, "hf_llama_mapping.yaml")
    metadata = os.path.join(HERE, "hf_llama_model.yaml")
    ckpt = os.path.join(work, "hf_llama_ckpt")
    run([tool, "import", model, ckpt, "--mapping", mapping, "--metadata", metadata])
    for tp in (1, 2):
        launch(tp, 0, "decoder", ckpt, io, str(tp), "1")

    # Without the permutation the import succeeds and the logits are wrong.
    with open(mapping) as f:
        plain = f.read().replace(", rope_permute: half_to_interleaved, heads: 4", "").replace(
            ", rope_permute: half_to_interleaved, heads: 2", "")
    if "rope_permute" in plain:
        fail("could not take rope_permute out of " + mapping)
    plain_mapping = os.path.join(work, "no_permutation.yaml")
    with open(plain_mapping, "w") as f:
        f.write(plain)
    wrong = os.path.join(work, "hf_llama_unpermuted_ckpt")
    run([tool, "import", model, wrong, "--mapping", plain_mapping, "--metadata", metadata])
    launch(1, 1, "decoder", wrong, io, "1", "1")

    exported = os.path.join(work, "hf_llama_export.safetensors")
    run([tool, "export", ckpt, exported, "--mapping", mapping])
    same_tensors(model, exported, "export with rope_permute")

    # Metadata that contradicts the tensors' shapes: refused at import, naming the key and
    # the tensor, before a checkpoint exists.
    with open(metadata) as f:
        good = f.read()
    for line, key, tensor in (("n_kv_heads: 2", "n_kv_heads: 4", "'layers.0.attn.k.weight'"),
                              ("vocab: 32", "vocab: 31", "'embed.weight'"),
                              ("d_model: 16", "d_model: 32", "'embed.weight'"),
                              ("hidden: 24", "hidden: 20", "'layers.0.mlp.gate.weight'"),
                              ("n_layers: 2", "n_layers: 3", "'layers.2.attn_norm.weight'"),
                              ("n_layers: 2", "n_layers: 1", "'layers.1."),
                              ("tie_embeddings: false", "tie_embeddings: true", "'head.weight'"),
                              ("n_heads: 4", "n_heads: 3", "model.d_model (16) must be a multiple of model.n_heads")):
        if line not in good:
            fail(f"{metadata} has no line '{line}'")
            continue
        bad = os.path.join(work, "bad_model.yaml")
        with open(bad, "w") as f:
            f.write(good.replace(line, key))
        out = os.path.join(work, "bad_ckpt")
        proc = run([tool, "import", model, out, "--mapping", mapping, "--metadata", bad], expect=2)
        name = "model." + key.split(":")[0]
        if name not in proc.stderr or tensor not in proc.stderr or "bad_model.yaml" not in proc.stderr:
            fail(f"{key}: the import error does not name {name}, {tensor} and the metadata file:\n{proc.stderr}")
        else:
            print(f"{key}: {proc.stderr.strip()}")
        if os.path.exists(out):
            fail(f"{key}: the refused import left {out} behind")

    # f64 weights: refused with the way out (--dtype f32), never a later load error.
    f64_model = os.path.join(work, "hf_llama_f64.safetensors")
    tensors, _ = st.load(model)
    st.save(f64_model, [(k, v.astype(np.float64)) for k, v in tensors.items()])
    f64_ckpt = os.path.join(work, "hf_llama_f64_ckpt")
    proc = run([tool, "import", f64_model, f64_ckpt, "--mapping", mapping, "--metadata", metadata], expect=2)
    if "F64" not in proc.stderr or "--dtype f32" not in proc.stderr or os.path.exists(f64_ckpt):
        fail(f"f64 weights: the import error does not say F64 and --dtype f32:\n{proc.stderr}")
    run([tool, "import", f64_model, f64_ckpt, "--mapping", mapping, "--metadata", metadata, "--dtype", "f32"])
    launch(1, 0, "decoder", f64_ckpt, io, "1", "1")

    # docs/pytorch.md shows the mapping's rules as they are.
    with open(mapping) as f:
        rules = f.read()
    rules = rules[rules.index("tensors:"):]
    with open(os.path.join(HERE, "..", "..", "docs", "pytorch.md")) as f:
        if "```yaml\n" + rules + "```" not in f.read():
            fail("docs/pytorch.md does not show the rules of " + mapping + " whole")


def hf_config_json(config, architecture="LlamaForCausalLM"):
    out = {"architectures": [architecture], "model_type": "llama", "hidden_act": "silu",
           "max_position_embeddings": 64, "torch_dtype": "float32"}
    out.update(config)
    return out


def write_dir(path, config, state, shards=1, architecture="LlamaForCausalLM"):
    """A Hugging Face model directory: config.json and model.safetensors, or `shards`
    model-0000k-of-0000n.safetensors files with model.safetensors.index.json."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config_json(config, architecture), f, indent=2)
    items = [(k, v.numpy()) for k, v in state.items()]
    if shards == 1:
        st.save(os.path.join(path, "model.safetensors"), items, {"format": "pt"})
        return
    weight_map = {}
    per = (len(items) + shards - 1) // shards
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = items[k * per:(k + 1) * per]
        st.save(os.path.join(path, name), part, {"format": "pt"})
        weight_map.update({key: name for key, _ in part})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


def all_tensors(path):
    """{name: numpy array} of a directory's model.safetensors or all its shards."""
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            out.update(st.load(os.path.join(path, name))[0])
    return out


def same_dir_tensors(a, b, what):
    ta, tb = all_tensors(a), all_tensors(b)
    if sorted(ta) != sorted(tb):
        fail(f"{what}: names differ: {sorted(set(ta) ^ set(tb))}")
        return
    for name, x in ta.items():
        y = tb[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            fail(f"{what}: '{name}' differs ({x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)})")
    print(f"{what}: {len(ta)} tensors bit for bit")


def check_directories(tool, parity, work, launch):
    """tessera-ckpt import-hf / export-hf on Hugging Face model directories."""
    _, io, state = write_model(work, "hf_dir", CONFIG, 44)
    hf = os.path.join(work, "hf")
    write_dir(hf, CONFIG, state)
    ckpt = os.path.join(work, "hf_ckpt")
    run([tool, "import-hf", hf, ckpt])
    # tp 4: one query head per rank, the 2 key/value heads repeated.
    for tp in (1, 2, 4):
        launch(tp, 0, "decoder", ckpt, io, str(tp), "1")
    out = os.path.join(work, "hf_out")
    run([tool, "export-hf", ckpt, out])
    same_dir_tensors(hf, out, "import-hf then export-hf")
    with open(os.path.join(out, "config.json")) as f:
        written = json.load(f)
    for key, value in hf_config_json(CONFIG).items():
        if written.get(key) != value:
            fail(f"export-hf config.json: {key} is {written.get(key)!r}, expected {value!r}")
    # The exported directory computes torch's logits (the reference reads it as written).
    exported = {k: torch.from_numpy(v.copy()) for k, v in all_tensors(out).items()}
    got = hf_logits(exported, written, torch.from_numpy(st.load(io)[0]["ids"]))
    want = torch.from_numpy(st.load(io)[0]["logits"]).double()
    if not float((got - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max())):
        fail("the exported directory's logits differ from the original's")

    # A checkpoint without import-hf's `hf:` metadata (imported with a mapping, or written
    # by tessera-run) exports as LlamaForCausalLM.
    mapped_ckpt = os.path.join(work, "hf_mapped_ckpt")
    run([tool, "import", os.path.join(hf, "model.safetensors"), mapped_ckpt, "--mapping",
         os.path.join(HERE, "hf_llama_mapping.yaml"), "--metadata", os.path.join(HERE, "hf_llama_model.yaml")])
    mapped_out = os.path.join(work, "hf_mapped_out")
    run([tool, "export-hf", mapped_ckpt, mapped_out])
    same_dir_tensors(hf, mapped_out, "import with the mapping then export-hf")
    with open(os.path.join(mapped_out, "config.json")) as f:
        if json.load(f).get("architectures") != ["LlamaForCausalLM"]:
            fail("export-hf without hf: metadata does not write LlamaForCausalLM")

    # Sharded, with an index; a missing shard is an error naming it.
    sharded = os.path.join(work, "hf_sharded")
    write_dir(sharded, CONFIG, state, shards=2)
    sharded_ckpt = os.path.join(work, "hf_sharded_ckpt")
    run([tool, "import-hf", sharded, sharded_ckpt])
    launch(1, 0, "decoder", sharded_ckpt, io, "1", "1")
    sharded_out = os.path.join(work, "hf_sharded_out")
    run([tool, "export-hf", sharded_ckpt, sharded_out])
    same_dir_tensors(sharded, sharded_out, "sharded import-hf then export-hf")
    os.remove(os.path.join(sharded, "model-00002-of-00002.safetensors"))
    missing = os.path.join(work, "missing_ckpt")
    proc = run([tool, "import-hf", sharded, missing], expect=2)
    if "model-00002-of-00002.safetensors" not in proc.stderr or os.path.exists(missing):
        fail(f"a missing shard: the error does not name it, or a checkpoint was left:\n{proc.stderr}")

    # Tied embeddings: no lm_head in the file, none written back.
    tied_config = dict(CONFIG, tie_word_embeddings=True)
    _, tied_io, tied_state = write_model(work, "hf_tied", tied_config, 45)
    tied = os.path.join(work, "hf_tied")
    write_dir(tied, tied_config, tied_state)
    tied_ckpt = os.path.join(work, "hf_tied_ckpt")
    run([tool, "import-hf", tied, tied_ckpt])
    launch(1, 0, "decoder", tied_ckpt, tied_io, "1", "1")
    tied_out = os.path.join(work, "hf_tied_out")
    run([tool, "export-hf", tied_ckpt, tied_out])
    same_dir_tensors(tied, tied_out, "tied import-hf then export-hf")

    # What tessera's decoder cannot express, and a config.json the tensors contradict:
    # errors naming the key (or tensor), no checkpoint written.
    cases = [({"architectures": ["GPT2LMHeadModel"]}, "architectures"),
             ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
             ({"attention_bias": True}, "attention_bias"),
             ({"architectures": ["MistralForCausalLM"], "sliding_window": 4096}, "sliding_window"),
             ({"hidden_act": "gelu"}, "hidden_act"),
             ({"head_dim": 8}, "head_dim"),
             ({"num_key_value_heads": 4}, "model.n_kv_heads"),
             ({"vocab_size": 33}, "model.vocab"),
             ({"num_hidden_layers": 3}, "model.n_layers")]
    for change, key in cases:
        bad = os.path.join(work, "hf_bad")
        shutil.rmtree(bad, ignore_errors=True)
        architecture = change.get("architectures", ["LlamaForCausalLM"])[0]
        write_dir(bad, dict(CONFIG, **{k: v for k, v in change.items() if k != "architectures"}), state,
                  architecture=architecture)
        out_ckpt = os.path.join(work, "hf_bad_ckpt")
        proc = run([tool, "import-hf", bad, out_ckpt], expect=2)
        if key not in proc.stderr or os.path.exists(out_ckpt):
            fail(f"{change}: the error does not name {key}, or a checkpoint was left:\n{proc.stderr}")
        else:
            print(f"{change}: {proc.stderr.strip()}")
    # Qwen2's q/k/v biases: refused naming the tensor.
    bad = os.path.join(work, "hf_bias")
    shutil.rmtree(bad, ignore_errors=True)
    biased = dict(state)
    biased["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(CONFIG["hidden_size"])
    write_dir(bad, CONFIG, biased, architecture="Qwen2ForCausalLM")
    proc = run([tool, "import-hf", bad, os.path.join(work, "hf_bias_ckpt")], expect=2)
    if "model.layers.0.self_attn.q_proj.bias" not in proc.stderr:
        fail(f"a Qwen2 bias: the error does not name the tensor:\n{proc.stderr}")


def main():
    mode, tool, parity, work = sys.argv[1:5]
    mpiexec, np_flag, preflags = sys.argv[5], sys.argv[6], sys.argv[7:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def launch(n, expect, *args):
        run([mpiexec, np_flag, str(n), *preflags, parity, *args], expect)

    if mode == "mapping":
        check_mapping(tool, parity, work, launch)
    elif mode == "directories":
        check_directories(tool, parity, work, launch)
    else:
        fail("unknown mode " + mode)
    print("hugging face check:", "FAILED" if FAILURES else "passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
