"""What goes over the network at a split point, made smaller: a *codec* with a device side (``down``)
and an edge side (``up``), inserted between the device's and the edge's part of a network.

- :class:`TransferLayer`: ScissionLite's transfer layer, a trained down-sampling/up-sampling pair: a
  strided ``spatial`` x ``spatial`` convolution to ``channels / reduction`` channels on the device, the
  transposed convolution back on the edge; ``reduction * spatial**2`` fewer values cross the network.
- :class:`Int8Codec`: post-training int8 quantisation of the split tensor (per image, asymmetric
  min/max; one byte a value plus its scale and offset): the untrained way to send 4x fewer bytes.

:func:`with_codec` builds the network with a codec at split ``s`` (the device part frozen: eval mode,
no gradients, so the device runs the trained base network's layers unchanged and one base network
serves every split); :func:`points` picks the split points worth a transfer layer; :func:`codec_times`
times a codec's two sides on a real processor at batch 1."""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn as nn

from repro.split.exits import ExitNet
from repro.split.profile import threads
from repro.timing import time_cpu, time_cuda


class TransferLayer(nn.Module):
    """``down``: Conv2d(c, ceil(c / reduction), spatial, stride spatial); ``up``: its transpose back
    to c channels (no activation: the split tensor may be a BN output, negative values included)."""

    def __init__(self, channels: int, reduction: int = 4, spatial: int = 2):
        super().__init__()
        if reduction < 1 or spatial < 1:
            raise ValueError(f"need reduction >= 1 and spatial >= 1, got {reduction} and {spatial}")
        sent = -(-channels // reduction)
        self.down = nn.Conv2d(channels, sent, spatial, stride=spatial)
        self.up = nn.ConvTranspose2d(sent, channels, spatial, stride=spatial)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))

    @staticmethod
    def sent_bytes(z: torch.Tensor) -> int:
        return z.numel() * z.element_size()


class Int8Codec(nn.Module):
    """Per-image asymmetric int8 quantisation: ``down`` returns the uint8 codes and, per image, the
    offset and scale (float32); ``up`` restores floats."""

    def down(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = x.flatten(1)
        lo, hi = flat.amin(1, keepdim=True), flat.amax(1, keepdim=True)
        scale = ((hi - lo) / 255).clamp_min(torch.finfo(x.dtype).tiny)
        q = ((flat - lo) / scale).round_().clamp_(0, 255).to(torch.uint8)
        return q.view(x.shape), torch.cat([lo, scale], 1)

    def up(self, z: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        q, params = z
        lo, scale = params[:, :1], params[:, 1:]
        return (q.flatten(1).float() * scale + lo).view(q.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))

    @staticmethod
    def sent_bytes(z: tuple[torch.Tensor, torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in z)


class Frozen(nn.Module):
    """Layers kept as trained: always in eval mode (BN statistics unchanged), no gradients."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.body = nn.Sequential(*layers).requires_grad_(False).eval()

    def train(self, mode: bool = True) -> "Frozen":
        return super().train(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def with_codec(net: ExitNet, s: int, codec: nn.Module) -> ExitNet:
    """``net``'s final exit with ``codec`` at split ``s`` (1 <= s < the final exit's attach point): the
    device part frozen, the codec and the edge part trainable; every layer a copy of ``net``'s."""
    a = net.attach[-1]
    if not 1 <= s < a:
        raise ValueError(f"a codec goes between two layers: need 1 <= s < {a}, got {s}")
    layers = [Frozen(copy.deepcopy(list(net.layers[:s]))), codec, *copy.deepcopy(list(net.layers[s:a]))]
    return ExitNet(layers, [copy.deepcopy(net.heads[-1])], [len(layers)], f"{net.name}@{s}")


@torch.no_grad()
def split_tensors(net: ExitNet, x: torch.Tensor) -> list[torch.Tensor]:
    """The tensor crossing each split point 0..L for input ``x``."""
    net.eval()
    out = [x]
    for layer in net.layers:
        out.append(layer(out[-1].clone()))
    return out


def points(net: ExitNet, spatial: int, image_size: int = 32) -> list[int]:
    """Split points for a transfer layer: of the 4-D split tensors (past the input, before the
    classifier) whose side is a multiple of ``spatial``, at each resolution the one of fewest bytes
    (the earliest on a tie): where a split at that resolution sends least and the device runs least."""
    x = torch.zeros(1, 3, image_size, image_size)
    best: dict[int, tuple[int, int]] = {}
    for s, t in enumerate(split_tensors(net, x)[1:net.attach[-1]], start=1):
        if t.dim() != 4 or t.shape[-1] % spatial or t.shape[-1] < spatial:
            continue
        key = (t.numel(), s)
        best[t.shape[-1]] = min(best.get(t.shape[-1], key), key)
    return sorted(s for _, s in best.values())


def codec_times(codec: nn.Module, x: torch.Tensor, device: str, n_threads: int = 1, warmup: int = 3,
                repeats: int = 20) -> dict[str, float]:
    """Batch-1 time of the codec's device side (``down``) on ``x`` and its edge side (``up``) on what
    ``down`` sends, each on ``device`` (the CPU at ``n_threads``, or a GPU by CUDA events); and the
    bytes sent."""
    dev = torch.device(device)
    codec = codec.to(dev).eval()
    x = x.to(dev)
    timer = time_cuda if dev.type == "cuda" else time_cpu
    with threads(n_threads) if dev.type == "cpu" else contextlib.nullcontext(), torch.no_grad():
        z = codec.down(x)
        down = timer(lambda: codec.down(x), warmup=warmup, repeats=repeats)
        up = timer(lambda: codec.up(z), warmup=warmup, repeats=repeats)
    return {"down_s": down.median_s, "up_s": up.median_s, "bytes": codec.sent_bytes(z)}
