"""DenseNet (Huang et al., "Densely Connected Convolutional Networks", CVPR 2017) as an ordinary
``nn.Module`` in the torchvision style: every dense layer reads the concatenation of all feature
maps before it in its block. DenseNet-121: growth 32, blocks (6, 12, 24, 16), bottleneck 4x growth,
compression 0.5, 64 stem features; 8.0M parameters at 224x224, 1000 classes."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = self.conv1(F.relu(self.norm1(torch.cat(features, 1))))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    """A ModuleDict with its own forward, as torchvision's _DenseBlock."""

    def __init__(self, layers: int, cin: int, growth: int, bn_size: int):
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth, bn_size)
                          for i in range(layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm, self.conv = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(F.relu(self.norm(x))), 2)


def dense_stages(cin: int, growth: int, blocks: Sequence[int], bn_size: int,
                 compression: float) -> tuple[list[nn.Module], int]:
    """The dense blocks with a transition (compressing the channels by ``compression``) between each
    two; returns them and the channels out."""
    stages, c = [], cin
    for k, n in enumerate(blocks):
        stages.append(DenseBlock(n, c, growth, bn_size))
        c += n * growth
        if k + 1 < len(blocks):
            out = int(c * compression)
            stages.append(Transition(c, out))
            c = out
    return stages, c


class DenseNet(nn.Module):
    def __init__(self, num_classes: int = 1000, growth: int = 32, blocks: Sequence[int] = (6, 12, 24, 16),
                 init_features: int = 64, bn_size: int = 4, compression: float = 0.5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, init_features, 7, 2, 3, bias=False), nn.BatchNorm2d(init_features),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, c = dense_stages(init_features, growth, blocks, bn_size, compression)
        self.stages = nn.ModuleList(stages)
        self.norm = nn.BatchNorm2d(c)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.norm(x)), 1), 1))


def densenet(num_classes: int = 1000, **kw) -> DenseNet:
    """DenseNet-121 by default."""
    return DenseNet(num_classes, **kw)
