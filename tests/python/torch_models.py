"""PyTorch twins of tessera's reference models, written the way a PyTorch user would
write them (their own names, a fused qkv projection, a head stored [d_model, vocab]),
for the parity test check_pytorch.py. The mappings emulator_mapping.yaml and
decoder_mapping.yaml translate their state dicts to tessera's names.

FieldEmulator   = models::FieldEmulator: encoder conv k x k ("same": periodic in
                  longitude, zeros beyond the poles), channel-MLP blocks
                  x + fc2(gelu(fc1(x))) of 1x1 convolutions, exact GELU, decoder conv,
                  residual y = x + net(x).
Decoder         = models::Decoder: token embedding, pre-norm blocks (RMSNorm, causal
                  multi-head attention without biases or positions, RMSNorm, SwiGLU),
                  final RMSNorm, linear head.
                  With n_kv_heads and/or rope_theta, the current decoder: Llama-style
                  attention (separate wq, wk, wv, wo; grouped-query attention through
                  repeat_interleave of the key/value heads; rotary embeddings as complex
                  multiplication of interleaved feature pairs, freqs_cis as in Llama).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class ChannelMlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.fc1 = nn.Conv2d(width, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, width, 1)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class FieldEmulator(nn.Module):
    def __init__(self, channels, width, mlp_hidden, blocks, kernel):
        super().__init__()
        self.kernel = kernel
        self.enc = nn.Conv2d(channels, width, kernel)
        self.mixer = nn.ModuleList(ChannelMlp(width, mlp_hidden) for _ in range(blocks))
        self.dec = nn.Conv2d(width, channels, kernel)

    def pad(self, x):
        # PyTorch's padding='same' split (the extra row/column after for even kernels):
        # circular along longitude, then zeros beyond the poles (corners included).
        before = (self.kernel - 1) // 2
        after = self.kernel - 1 - before
        x = F.pad(x, (before, after, 0, 0), mode="circular")
        return F.pad(x, (0, 0, before, after))

    def forward(self, x):
        h = self.enc(self.pad(x))
        for block in self.mixer:
            h = block(h)
        return x + self.dec(self.pad(F.gelu(h)))


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        batch, seq, d_model = x.shape
        head_dim = d_model // self.n_heads
        q, k, v = (t.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
                   for t in self.qkv(x).split(d_model, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        context = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.proj(context.transpose(1, 2).reshape(batch, seq, d_model))


def rotary_frequencies(head_dim, seq, theta):
    """e^{i s w_k} for positions s < seq and w_k = theta^(-2k/head_dim): [seq, head_dim/2]."""
    w = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), w)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary(x, freqs):
    """x [batch, seq, heads, head_dim]: feature pairs (2k, 2k+1) as complex numbers times freqs."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    rotated = torch.view_as_real(pairs * freqs[None, :, None, :]).flatten(3)
    return rotated.to(x.dtype)


class GroupedQueryAttention(nn.Module):
    """Causal attention with n_kv_heads key/value heads (dividing n_heads) and optional
    rotary position embeddings (rope_theta None: none)."""

    def __init__(self, d_model, n_heads, n_kv_heads, rope_theta):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.rope_theta = n_heads, n_kv_heads, rope_theta
        self.head_dim = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x):
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        if self.rope_theta is not None:
            freqs = rotary_frequencies(self.head_dim, seq, self.rope_theta)
            q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=2)  # query head h reads key/value head h // group
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        context = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.wo(context.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)  # gate
        self.w3 = nn.Linear(d_model, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, d_model, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, hidden, eps, n_kv_heads=None, rope_theta=None):
        super().__init__()
        self.ln1 = RMSNorm(d_model, eps)
        if n_kv_heads is None and rope_theta is None:
            self.attn = Attention(d_model, n_heads)
        else:
            self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads or n_heads, rope_theta)
        self.ln2 = RMSNorm(d_model, eps)
        self.ffn = FeedForward(d_model, hidden)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.ffn(self.ln2(h))


class Decoder(nn.Module):
    def __init__(self, vocab, d_model, n_heads, hidden, n_layers, eps, n_kv_heads=None, rope_theta=None):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, hidden, eps, n_kv_heads, rope_theta)
                                    for _ in range(n_layers))
        self.norm = RMSNorm(d_model, eps)
        # Stored [d_model, vocab] and applied as h @ lm_head: tessera's Linear holds
        # [vocab, d_model], so the mapping transposes it.
        self.lm_head = nn.Parameter(torch.randn(d_model, vocab) / math.sqrt(d_model))

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.lm_head


def perturb_norms(model, generator):
    """RMSNorm weights start at one; make them differ so that a mapping that swapped two
    norms would change the outputs."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, RMSNorm):
                module.weight.add_(0.2 * torch.randn(module.weight.shape, generator=generator))


def tessera_names(model):
    """{tessera FQN: PyTorch parameter} for a Decoder built with n_kv_heads or rope_theta
    (separate wq/wk/wv/wo; the head transposed by the caller)."""
    names = {"embed.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "head.weight": "lm_head"}
    for i in range(len(model.blocks)):
        b, t = f"blocks.{i}.", f"layers.{i}."
        names.update({t + "attn_norm.weight": b + "ln1.weight", t + "mlp_norm.weight": b + "ln2.weight",
                      t + "attn.q.weight": b + "attn.wq.weight", t + "attn.k.weight": b + "attn.wk.weight",
                      t + "attn.v.weight": b + "attn.wv.weight", t + "attn.o.weight": b + "attn.wo.weight",
                      t + "mlp.gate.weight": b + "ffn.w1.weight", t + "mlp.up.weight": b + "ffn.w3.weight",
                      t + "mlp.down.weight": b + "ffn.w2.weight"})
    params = dict(model.named_parameters())
    return {ours: params[theirs] for ours, theirs in names.items()}
