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


class FeedForward(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)  # gate
        self.w3 = nn.Linear(d_model, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, d_model, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, hidden, eps):
        super().__init__()
        self.ln1 = RMSNorm(d_model, eps)
        self.attn = Attention(d_model, n_heads)
        self.ln2 = RMSNorm(d_model, eps)
        self.ffn = FeedForward(d_model, hidden)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.ffn(self.ln2(h))


class Decoder(nn.Module):
    def __init__(self, vocab, d_model, n_heads, hidden, n_layers, eps):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, hidden, eps) for _ in range(n_layers))
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
