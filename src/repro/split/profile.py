"""Per-layer latency of an :class:`~repro.split.exits.ExitNet` on one real processor, at batch 1 (one
image, as a device-edge system serves it).

Each layer (and each part of each exit head) is timed alone on the tensor it receives in a full
forward pass: on the CPU with ``torch.set_num_threads(threads)`` and ``time.perf_counter``, on a GPU
with CUDA events (``repro.timing.time_cuda``); the median of ``repeats`` after ``warmup``. With each
layer come the features the latency predictors use (FLOPs, input and output bytes) and the exact
size of the tensor that crosses the network at each split point (``numel * element_size`` of the
tensor the device would send)."""

from __future__ import annotations

import contextlib

import pandas as pd
import torch
import torch.nn as nn

from repro.split.exits import ExitNet
from repro.timing import time_cpu, time_cuda

KINDS = {nn.Conv2d: "conv", nn.Linear: "fc", nn.ReLU: "relu", nn.MaxPool2d: "pool", nn.AdaptiveAvgPool2d: "pool",
         nn.BatchNorm2d: "bn", nn.Flatten: "flatten", nn.Dropout: "dropout"}


def kind(module: nn.Module) -> str:
    """The layer type the predictors are fitted per: conv, fc, relu, pool, bn, lrn, block, ..."""
    for cls, name in KINDS.items():
        if isinstance(module, cls):
            return name
    return "lrn" if "ResponseNorm" in type(module).__name__ else "block"


def flops(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Multiply-adds count 2; a layer without weights counts one operation per output value; a
    composite (a residual block) sums its convolutions and linear layers, plus its output values."""
    if isinstance(module, nn.Conv2d):
        k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
        return 2.0 * y.numel() * k
    if isinstance(module, nn.Linear):
        return 2.0 * module.in_features * module.out_features * (x.numel() // module.in_features)
    if kind(module) != "block":
        return float(y.numel())
    total = 0.0

    def hook(m, inp, out):
        nonlocal total
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            total += flops(m, inp[0], out)

    handles = [m.register_forward_hook(hook) for m in module.modules() if m is not module]
    with torch.no_grad():
        module(x.clone())
    for h in handles:
        h.remove()
    return total + float(y.numel())


def units(net: ExitNet) -> list[tuple[str, int, nn.Module]]:
    """(where, index, module): every backbone layer ('layer', i) and every head part ('head<e>', j)."""
    out = [("layer", i, m) for i, m in enumerate(net.layers)]
    for e, head in enumerate(net.heads):
        parts = list(head.children()) if isinstance(head, nn.Sequential) else [head]
        out += [(f"head{e}", j, m) for j, m in enumerate(parts)]
    return out


def _inputs(net: ExitNet, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
    """The tensor each unit receives in a forward pass (cloned: in-place ReLUs would overwrite it)."""
    seen = {}
    with torch.no_grad():
        h = x
        for i, layer in enumerate(net.layers):
            seen[("layer", i)] = h.clone()
            h = layer(h)
            for e, a in enumerate(net.attach):
                if a == i + 1:
                    g = h
                    head = net.heads[e]
                    for j, part in enumerate(head.children() if isinstance(head, nn.Sequential) else [head]):
                        seen[(f"head{e}", j)] = g.clone()
                        g = part(g)
    return seen


@contextlib.contextmanager
def threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def profile(net: ExitNet, device: str, n_threads: int = 1, warmup: int = 3, repeats: int = 20,
            image_size: int = 32) -> pd.DataFrame:
    """One row per unit: where, index, kind, flops, in_bytes, out_bytes, time_s (median), min_s, max_s.
    ``device``: 'cpu' (timed at ``n_threads`` threads) or 'cuda'."""
    dev = torch.device(device)
    net = net.to(dev).eval()
    x = torch.randn(1, 3, image_size, image_size, generator=torch.Generator().manual_seed(0)).to(dev)
    rows = []
    with threads(n_threads) if dev.type == "cpu" else contextlib.nullcontext(), torch.no_grad():
        seen = _inputs(net, x)
        for where, index, module in units(net):
            inp = seen[(where, index)]
            y = module(inp.clone())
            # an in-place ReLU reruns on its own output: the same work each repeat
            timer = time_cuda if dev.type == "cuda" else time_cpu
            t = timer(lambda m=module, t=inp: m(t), warmup=warmup, repeats=repeats)
            rows.append(dict(where=where, index=index, kind=kind(module), flops=flops(module, inp, y),
                             in_bytes=inp.numel() * inp.element_size(), out_bytes=y.numel() * y.element_size(),
                             time_s=t.median_s, min_s=t.min_s, max_s=t.max_s, repeats=t.repeats))
    return pd.DataFrame(rows)


def split_bytes(table: pd.DataFrame) -> list[int]:
    """Bytes sent at each split point 0..L of a profile: the input, then each layer's output."""
    layers = table[table["where"] == "layer"].sort_values("index")
    return [int(layers["in_bytes"].iloc[0]), *map(int, layers["out_bytes"])]


def processor_name(device: str, n_threads: int) -> str:
    """How a profile names its processor: the GPU's name, or the CPU's with the thread count."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name()
    import platform

    cpu = platform.processor() or platform.machine()
    return f"{cpu} CPU, {n_threads} thread{'s' if n_threads > 1 else ''} (not a Pi / TX2)"
