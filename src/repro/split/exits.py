"""Networks with early exits, as a flat list of layers: split point ``s`` runs layers ``0..s-1`` on the
device and sends the tensor they produce (the input when ``s == 0``) to the edge, which runs the rest.
An exit ``e`` is a head attached after ``attach[e]`` layers; the last exit is the network's own
classifier. Every layer and head part is a plain module, so the profiler times each one alone.

- :func:`alexnet_exits`: the AlexNet-style CIFAR-10 network of BranchyNet and Edgent (five conv layers
  with LRN after the first two, three fully connected layers; ``width`` scales the channels), with
  exits after conv1, conv2, conv3, conv4 and the final classifier: Edgent's five exit points.
- :func:`resnet_exits`: a CIFAR ResNet (:func:`repro.models.resnet.cifar_resnet`, option A shortcuts,
  each residual block one layer) with an exit after each stage and the final classifier.
Exit heads (BranchyNet's branches, small): 3x3 conv, ReLU, 2x2 average pooling, one linear layer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from repro.models.lrn import FusedLocalResponseNorm
from repro.models.resnet import cifar_resnet

HEAD_CHANNELS = 32  # channels of an exit head's conv, times the width multiplier (assumed: BranchyNet's small branches)


class ExitNet(nn.Module):
    """``layers``: the backbone, one split point between any two; ``heads[e]`` runs after ``attach[e]``
    layers. ``forward`` returns every exit's logits (training); :meth:`exit_logits` one exit's."""

    def __init__(self, layers: list[nn.Module], heads: list[nn.Module], attach: list[int], name: str):
        super().__init__()
        if len(heads) != len(attach) or sorted(attach) != list(attach) or len(set(attach)) != len(attach):
            raise ValueError(f"attach must increase, one per head: {attach}")
        if attach[-1] != len(layers) or attach[0] < 1:
            raise ValueError(f"the last exit attaches after every layer ({len(layers)}), the first after >= 1: {attach}")
        self.layers = nn.ModuleList(layers)
        self.heads = nn.ModuleList(heads)
        self.attach = list(attach)
        self.name = name

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out, e = [], 0
        for i, layer in enumerate(self.layers, start=1):
            x = layer(x)
            while e < len(self.attach) and self.attach[e] == i:
                out.append(self.heads[e](x))
                e += 1
        return out

    def exit_logits(self, x: torch.Tensor, exit: int) -> torch.Tensor:
        for layer in self.layers[: self.attach[exit]]:
            x = layer(x)
        return self.heads[exit](x)


def exit_head(channels: int, num_classes: int, width: float) -> nn.Sequential:
    hidden = max(4, round(HEAD_CHANNELS * width))
    return nn.Sequential(nn.Conv2d(channels, hidden, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(4 * hidden, num_classes))


def alexnet_exits(num_classes: int = 10, width: float = 1.0, fc: int = 1024, dropout: float = 0.5) -> ExitNet:
    """AlexNet for 32x32 inputs: conv 64-192-384-256-256 (times ``width``), 3x3/2 max-pooling after
    conv1, conv2 and conv5, LRN after the first two pools, fully connected ``fc``-``fc``-classes."""
    c = [max(4, round(k * width)) for k in (64, 192, 384, 256, 256)]
    f = max(8, round(fc * width))

    def relu():
        return nn.ReLU(inplace=True)

    def lrn():
        return FusedLocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)

    layers = [nn.Conv2d(3, c[0], 5, padding=2), relu(), nn.MaxPool2d(3, 2, 1), lrn(),          # 16x16
              nn.Conv2d(c[0], c[1], 5, padding=2), relu(), nn.MaxPool2d(3, 2, 1), lrn(),       # 8x8
              nn.Conv2d(c[1], c[2], 3, padding=1), relu(),
              nn.Conv2d(c[2], c[3], 3, padding=1), relu(),
              nn.Conv2d(c[3], c[4], 3, padding=1), relu(), nn.MaxPool2d(3, 2, 1),             # 4x4
              nn.Flatten(), nn.Dropout(dropout), nn.Linear(c[4] * 16, f), relu(),
              nn.Dropout(dropout), nn.Linear(f, f), relu()]
    attach = [4, 8, 10, 12, len(layers)]
    heads = [exit_head(ch, num_classes, width) for ch in (c[0], c[1], c[2], c[3])] + [nn.Linear(f, num_classes)]
    return ExitNet(layers, heads, attach, "alexnet")


def resnet_exits(depth: int = 20, num_classes: int = 10, width: int = 16) -> ExitNet:
    """A CIFAR ResNet of ``depth`` = 6n+2: stem (conv, BN, ReLU), 3n residual blocks, each one layer;
    exits after stage 1 and stage 2 and the final pool + linear classifier."""
    body = list(cifar_resnet(depth, num_classes, width).children())
    layers, final = body[:-3], nn.Sequential(*body[-3:])
    n = (depth - 2) // 6
    attach = [3 + n, 3 + 2 * n, len(layers)]
    heads = [exit_head(width, num_classes, width / 16), exit_head(2 * width, num_classes, width / 16), final]
    return ExitNet(layers, heads, attach, "resnet")


def build(name: str, **kw) -> ExitNet:
    builders = {"alexnet": alexnet_exits, "resnet": resnet_exits}
    if name not in builders:
        raise ValueError(f"unknown exit network {name!r}; known: {', '.join(builders)}")
    return builders[name](**kw)
