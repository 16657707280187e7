#!/usr/bin/python3
"""The ONNX test zoo (issue 42): five small networks a climate-ML group would write in
PyTorch, exported by PyTorch's own exporter, with what a test needs to hold tessera's
import to PyTorch's numbers.

    /usr/bin/python3 tests/onnx/zoo/make_zoo.py OUTDIR

Debian's torch 1.13 (CPU) and onnx 1.12. For each model NAME, OUTDIR/NAME/ holds

    model.onnx   torch.onnx.export: f32, static shapes, do_constant_folding=True, the input
                 named "x" and the output "y"
    x.npy        the input (f32)
    y.npy        PyTorch's output for x
    w.npy        a fixed weight of y's shape: the loss is sum(y * w)
    grads.npz    d loss / d parameter for every parameter, keyed by the name of the ONNX
                 initializer that holds it and laid out as that initializer is

and OUTDIR/manifest.json lists per model the opset, the shapes, the op types of the graph
(coverage at a glance), every initializer with the parameter it holds and how (same,
transposed, reshaped), and the initializers that hold no parameter (BatchNorm's running
statistics, constants the exporter folded).

The models:
  unet       2 levels: Conv + GroupNorm + ReLU, MaxPool, nearest and bilinear Upsample, skip
             Concat (opset 13)
  resnet     strided conv stem, residual blocks with BatchNorm (eval), GlobalAveragePool +
             Linear head (opset 13)
  column_mlp a per-column parameterization on [batch, features]: Linear, SiLU, LayerNorm,
             Linear (opset 17: LayerNorm exports as LayerNormalization, SiLU as Sigmoid * x)
  vit        patch embedding (Conv, stride = patch), flatten/transpose, two hand-written
             encoder blocks (LayerNorm, multi-head attention, GELU MLP, residuals), mean-pool
             head (opset 13: LayerNorm exports as its ReduceMean/Sub/Pow/Sqrt/Div
             decomposition, GELU as the Erf pattern)
  periodic   periodic-longitude padding as torch.cat of slices along the last dim, zero
             padding along latitude with F.pad, then Conv2d with padding 0 (opset 13)

Naming the parameters: the exporter names an initializer by its state_dict key unless
constant folding made a new tensor from it (then "onnx::<Op>_<n>"): a Linear fed a 3-d
input becomes MatMul with the weight transposed and folded, a GroupNorm's affine weight is
unsqueezed to [C, 1, 1] and folded. So the script finds each parameter's initializer by
value: equal, equal to its transpose, or equal after a reshape. Every parameter is first
nudged by seeded noise so that no two hold the same values (a fresh LayerNorm's weight
and a BatchNorm's are both all ones); each parameter must match exactly one initializer.

BatchNorm: exporting in the default TrainingMode.EVAL lets the exporter fuse each
BatchNorm into the Conv before it (the "eval peephole"), which leaves initializers that
are no parameter of the model. Every model here is exported with
training=TrainingMode.PRESERVE on a model in eval mode: the same inference graph, with
BatchNormalization kept and initializers 1:1 with the parameters.

What the exporter leaves unfolded (so the importer runs it, on int64): chunk() becomes
Slice nodes whose bounds come from Shape -> Gather -> Add/Div/Mul (integer division);
F.pad's pads are built by ConstantOfShape -> Concat -> Reshape -> Slice(step -1, end
-INT64_MAX) -> Transpose -> Reshape -> Cast; GroupNorm's reshape back reads Shape; the
wrap's slices end at INT64_MAX; x ** -0.5 stays Pow of two Constants.

Periodic padding is written with torch.cat of slices, not Conv2d(padding_mode="circular"):
Debian's torch 1.13 exports "circular" wrongly (its Slice drops the last column).
"""

import json
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper


# ---- The models ------------------------------------------------------------------------

def conv_norm_relu(c_in, c_out, groups):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(groups, c_out), nn.ReLU())


class UNet(nn.Module):
    """Two levels down and up; the deeper upsampling is nearest, the shallower bilinear, so
    both Resize modes the exporter emits are in the zoo."""

    def __init__(self, c_in=2, c_out=1, width=4):
        super().__init__()
        self.enc1 = conv_norm_relu(c_in, width, 2)
        self.enc2 = conv_norm_relu(width, 2 * width, 2)
        self.bottom = conv_norm_relu(2 * width, 2 * width, 2)
        self.dec2 = conv_norm_relu(4 * width, width, 2)
        self.dec1 = conv_norm_relu(2 * width, width, 2)
        self.head = nn.Conv2d(width, c_out, 1)

    def forward(self, x):
        skip1 = self.enc1(x)
        skip2 = self.enc2(F.max_pool2d(skip1, 2))
        deep = self.bottom(F.max_pool2d(skip2, 2))
        up2 = F.interpolate(deep, scale_factor=2, mode="nearest")
        up1 = F.interpolate(self.dec2(torch.cat([up2, skip2], dim=1)), scale_factor=2, mode="bilinear",
                            align_corners=False)
        return self.head(self.dec1(torch.cat([up1, skip1], dim=1)))


class ResidualBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, c_in=2, classes=3, width=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block1 = ResidualBlock(width, width, 1)
        self.block2 = ResidualBlock(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ColumnMLP(nn.Module):
    """A parameterization applied to each grid column: [columns, features] in and out."""

    def __init__(self, features=6, hidden=16, outputs=3):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.fc2(self.norm(F.silu(self.fc1(x))))


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, d).transpose(1, 2) for t in (q, k, v))
        attention = torch.softmax(q @ k.transpose(-2, -1) * d ** -0.5, dim=-1)
        return self.proj((attention @ v).transpose(1, 2).reshape(b, n, c))


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, c_in=2, size=8, patch=2, dim=8, heads=2, depth=2, classes=3):
        super().__init__()
        self.patch = nn.Conv2d(c_in, dim, patch, stride=patch)
        self.position = nn.Parameter(torch.zeros(1, (size // patch) ** 2, dim))
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, 2 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.blocks(tokens)).mean(dim=1))


class PeriodicConv(nn.Module):
    """Convolutions on a lat-lon field: periodic in longitude (the last dim), zero at the poles."""

    def __init__(self, c_in=2, c_out=2, width=4, kernel=3):
        super().__init__()
        self.halo = kernel // 2
        self.conv1 = nn.Conv2d(c_in, width, kernel)
        self.conv2 = nn.Conv2d(width, c_out, kernel)

    def pad(self, x):
        h = self.halo
        # Not padding_mode="circular": Debian's torch 1.13 exports it wrongly.
        x = torch.cat([x[..., -h:], x, x[..., :h]], dim=-1)
        return F.pad(x, (0, 0, h, h))

    def forward(self, x):
        return self.conv2(self.pad(torch.tanh(self.conv1(self.pad(x)))))


# name -> (model, input shape, opset)
MODELS = {
    "unet": (UNet, (1, 2, 8, 8), 13),
    "resnet": (ResNet, (2, 2, 8, 8), 13),
    "column_mlp": (ColumnMLP, (16, 6), 17),
    "vit": (ViT, (1, 2, 8, 8), 13),
    "periodic": (PeriodicConv, (1, 2, 6, 12), 13),
}


# ---- Export and references -------------------------------------------------------------

def nudge(model, seed):
    """Seeded noise on every parameter and BatchNorm statistic, so no two parameters hold
    equal values (matching initializers by value needs it) and the normalisations do not
    sit at their trivial initial state."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(1.0 + 0.5 * torch.rand(m.running_var.shape, generator=g))


def match_initializers(graph, parameters):
    """{initializer name: (parameter name, layout)}: the initializer holding each
    parameter, found by value (layout "same", "transposed" or "reshaped")."""
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    found = {}
    for pname, p in parameters.items():
        p = p.detach().numpy()
        hits = []
        for iname, a in arrays.items():
            if a.shape == p.shape and np.array_equal(a, p):
                hits.append((iname, "same"))
            elif p.ndim == 2 and a.shape == p.T.shape and np.array_equal(a, p.T):
                hits.append((iname, "transposed"))
            elif a.size == p.size and a.dtype == p.dtype and np.array_equal(a.reshape(-1), p.reshape(-1)):
                hits.append((iname, "reshaped"))
        if len(hits) != 1:
            raise SystemExit(f"parameter {pname}: {len(hits)} initializers hold it ({hits})")
        iname, layout = hits[0]
        if iname in found:
            raise SystemExit(f"initializer {iname} holds both {found[iname][0]} and {pname}")
        found[iname] = (pname, layout)
    return found, arrays


def in_layout(grad, layout, shape):
    """A parameter's gradient laid out as its initializer is."""
    g = grad.detach().numpy()
    return g.T.copy() if layout == "transposed" else g.reshape(shape)


def build(name, out_dir, seed):
    make, shape, opset = MODELS[name]
    torch.manual_seed(seed)
    model = make().eval()
    nudge(model, seed + 1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)

    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, torch.from_numpy(x), path, opset_version=opset, input_names=["x"],
                      output_names=["y"], do_constant_folding=True,
                      training=torch.onnx.TrainingMode.PRESERVE)

    xt = torch.from_numpy(x)
    y = model(xt)
    w = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    model.zero_grad()
    (y * torch.from_numpy(w)).sum().backward()

    model_proto = onnx.load(path)
    onnx.checker.check_model(model_proto, full_check=True)
    graph = model_proto.graph
    parameters = dict(model.named_parameters())
    found, arrays = match_initializers(graph, parameters)
    grads = {iname: in_layout(parameters[pname].grad, layout, arrays[iname].shape)
             for iname, (pname, layout) in found.items()}

    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), y.detach().numpy())
    np.save(os.path.join(folder, "w.npy"), w)
    np.savez(os.path.join(folder, "grads.npz"), **grads)
    return {
        "opset": opset,
        "input": list(x.shape),
        "output": list(y.shape),
        "ops": sorted({n.op_type for n in graph.node}),
        "parameters": {iname: {"parameter": pname, "layout": layout, "shape": list(arrays[iname].shape)}
                       for iname, (pname, layout) in sorted(found.items())},
        "other_initializers": {iname: list(a.shape) for iname, a in sorted(arrays.items()) if iname not in found},
    }


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    out_dir = argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    # The exporter's expected warnings: a Slice with steps != 1 (F.pad's reversed pads) is
    # not constant-folded, and PRESERVE with folding is only risky for a model in training
    # mode (these are all in eval mode).
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
    manifest = {name: build(name, out_dir, seed) for seed, name in enumerate(MODELS, start=42)}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    for name, entry in manifest.items():
        print(f"{name}: {' '.join(entry['ops'])}")


if __name__ == "__main__":
    main(sys.argv)
