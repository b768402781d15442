"""Residual networks (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016).

CIFAR ResNets (paper sec. 4.2): 6n+2 layers, a 3x3 stem and three stages of n basic blocks with
16/32/64 channels at 32/16/8 pixels. Shortcut option A by default, as in the paper's CIFAR
experiments: identity, and where the shape changes a stride-2 subsample with the new channels
zero-padded (no parameters; ResNet-32 has 0.46M parameters). Option B uses a 1x1 projection
conv + BN only where the shape changes.

ImageNet ResNets (paper sec. 3.4 and Table 1): 7x7 stem and 3x3 max-pool, four stages at
64/128/256/512 base width; basic blocks (18/34) or bottleneck blocks (50/101/152 or any block
counts), projection shortcuts (option B) where the shape changes, the stride on the 3x3 conv of
a bottleneck (the common "v1.5" placement; ResNet-50 has 25.6M parameters).

ClickTrain's "resnet32" (:func:`clicktrain_resnet32`): the network the ClickTrain artifact prunes
on CIFAR, an ImageNet-style ResNet narrowed to 32x32 inputs: a 3x3 stem of 64 channels (no 7x7,
no max-pool), four stages of [3, 4, 5, 3] basic blocks at 64/128/256/512 channels and 32/16/8/4
pixels, projection shortcuts (1x1 conv + BN) where the shape changes, global average pooling and
one linear layer: 20,101,450 parameters at 10 classes, against 0.46M for the CIFAR ResNet-32.

Every model is a flat ``nn.Sequential`` (stem layers, one entry per residual block, pooling,
classifier) so that layer-wise memory policies (checkpoint_sequential, per-layer offload) can
walk it without knowing the architecture.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn as nn
import torch.nn.functional as F

IMAGENET_STAGE_RATIO = (3, 4, 6, 3)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class ZeroPadShortcut(nn.Module):
    """Option A: subsample by ``stride`` and append zero channels (no parameters)."""

    def __init__(self, extra_channels: int, stride: int):
        super().__init__()
        self.extra, self.stride = extra_channels, stride

    def forward(self, x):
        return F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, 0, self.extra))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers plus a shortcut, then ReLU."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, shortcut: str = "B"):
        super().__init__()
        cout = width
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True), *_conv_bn(cout, cout, 3))
        if stride == 1 and cin == cout:
            self.shortcut = nn.Identity()
        elif shortcut == "A":
            self.shortcut = ZeroPadShortcut(cout - cin, stride)
        else:
            self.shortcut = nn.Sequential(*_conv_bn(cin, cout, 1, stride))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride), 1x1 expand to 4x width; projection shortcut if needed."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, shortcut: str = "B"):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 1), nn.ReLU(inplace=True),
            *_conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
            *_conv_bn(width, cout, 1),
        )
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(*_conv_bn(cin, cout, 1, stride))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def _init(model: nn.Module, zero_init_residual: bool) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    if zero_init_residual:  # each block starts as identity: helps very deep nets and short schedules
        for m in model.modules():
            if isinstance(m, (BasicBlock, Bottleneck)):
                nn.init.zeros_(m.body[-1].weight)
    return model


def _stages(block, cin: int, widths: Sequence[int], blocks: Sequence[int], first_stride: int,
            shortcut: str) -> tuple[list[nn.Module], int]:
    layers = []
    for stage, (width, n) in enumerate(zip(widths, blocks)):
        for i in range(n):
            stride = (first_stride if stage == 0 else 2) if i == 0 else 1
            layers.append(block(cin, width, stride, shortcut))
            cin = width * block.expansion
    return layers, cin


def cifar_resnet(depth: int = 32, num_classes: int = 10, width: int = 16, shortcut: str = "A",
                 zero_init_residual: bool = False) -> nn.Sequential:
    """CIFAR ResNet of ``depth`` = 6n+2 layers (20, 32, 44, 56, 110, ...); ``width`` = stem channels."""
    if (depth - 2) % 6 or depth < 8:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 >= 8, got {depth}")
    if shortcut not in ("A", "B"):
        raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")
    n = (depth - 2) // 6
    blocks, cout = _stages(BasicBlock, width, [width, 2 * width, 4 * width], [n] * 3, 1, shortcut)
    model = nn.Sequential(
        *_conv_bn(3, width, 3), nn.ReLU(inplace=True), *blocks,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cout, num_classes),
    )
    return _init(model, zero_init_residual)


def stage_blocks(total: int, ratio: Sequence[int] = IMAGENET_STAGE_RATIO) -> list[int]:
    """Spread ``total`` blocks over the stages in proportion ``ratio`` (largest remainder; each >= 1)."""
    if total < len(ratio):
        raise ValueError(f"need at least {len(ratio)} blocks (one per stage), got {total}")
    quotas = [total * r / sum(ratio) for r in ratio]
    counts = [max(1, int(q)) for q in quotas]
    by_remainder = sorted(range(len(ratio)), key=lambda i: counts[i] - quotas[i])
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    while sum(counts) > total:  # only after max(1, .) bumped a tiny stage
        counts[counts.index(max(counts))] -= 1
    return counts


def imagenet_resnet(blocks: Sequence[int] | int, block: str = "bottleneck", num_classes: int = 1000,
                    width: int = 64, zero_init_residual: bool = False) -> nn.Sequential:
    """ImageNet-style ResNet with ``blocks`` per stage (4 stages), or a total spread 3:4:6:3."""
    if isinstance(blocks, int):
        blocks = stage_blocks(blocks)
    blocks = list(blocks)
    if len(blocks) != 4 or min(blocks) < 1:
        raise ValueError(f"blocks must be 4 stage counts >= 1 (or one total), got {blocks}")
    kind = {"bottleneck": Bottleneck, "basic": BasicBlock}[block]
    body, cout = _stages(kind, width, [width, 2 * width, 4 * width, 8 * width], blocks, 1, "B")
    model = nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1), *body,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cout, num_classes),
    )
    return _init(model, zero_init_residual)


def bottleneck_resnet(blocks: Sequence[int] | int = IMAGENET_STAGE_RATIO, num_classes: int = 1000,
                      width: int = 64, zero_init_residual: bool = False) -> nn.Sequential:
    """Bottleneck ResNet of any depth: ``blocks=[3, 4, 6, 3]`` is ResNet-50, ``[3, 4, 23, 3]`` ResNet-101,
    ``[3, 8, 36, 3]`` ResNet-152; an int spreads that many blocks 3:4:6:3. Conv layers = 3 * blocks + 1
    (+ 4 projection shortcuts)."""
    return imagenet_resnet(blocks, "bottleneck", num_classes, width, zero_init_residual)


CLICKTRAIN_RESNET32_BLOCKS = (3, 4, 5, 3)


def clicktrain_resnet32(num_classes: int = 10, width: int = 64,
                        blocks: Sequence[int] = CLICKTRAIN_RESNET32_BLOCKS) -> nn.Sequential:
    """The ClickTrain artifact's "resnet32" (hipdac-lab/ICS21-ClickTrain at commit
    97d35ffb9aa2b08c34fd980b38cc82870f6694c8, ``resnet.py``: ``ResNet`` lines 70-98, ``resnet32``
    lines 107-108; read for the architecture, none of its code copied): stem conv 3x3 of ``width``
    channels, stride 1, BN, ReLU; stages of ``blocks`` basic blocks at ``width`` x 1/2/4/8, the first
    block of stages 2-4 with stride 2 and a projection shortcut; average pool over the last 4x4
    map; linear. At the defaults it has the artifact's 20,101,450 parameters (20,080,320 in convs,
    19,906,560 of them in the 3x3 convs after the stem: what pattern pruning works on), counted on
    the artifact's own ``resnet32()``. ``width`` and ``blocks`` shrink it for CPU smoke runs.
    Layer names differ from the artifact's (``3.body.0`` for ``layer1.0.conv1``: one flat
    Sequential, as every model here); the order of the convs is the same."""
    blocks = list(blocks)
    if len(blocks) != 4 or min(blocks) < 1:
        raise ValueError(f"blocks must be 4 stage counts >= 1, got {blocks}")
    body, cout = _stages(BasicBlock, width, [width, 2 * width, 4 * width, 8 * width], blocks, 1, "B")
    model = nn.Sequential(
        *_conv_bn(3, width, 3), nn.ReLU(inplace=True), *body,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cout, num_classes),
    )
    return _init(model, zero_init_residual=False)
