"""VGG (Simonyan & Zisserman, "Very Deep Convolutional Networks", ICLR 2015), configurations A-E.

CIFAR variant (the one CIFAR pruning papers train, e.g. ClickTrain's VGG-16): the 13 (16) or 16
(19) 3x3 conv layers with BatchNorm after each, 5 max-pools taking 32x32 to 1x1, and a single
linear classifier on the 512 features (14.7M parameters for VGG-16). ``width`` scales every
layer's channels (for tiny smoke runs).

ImageNet variant: the paper's network, three fully connected layers (4096, 4096, classes) with
dropout, BatchNorm optional (off in the paper). Adaptive 7x7 pooling so other input sizes work.
Both are flat ``nn.Sequential`` models (see :mod:`repro.models.resnet` for why).
"""

from __future__ import annotations

import torch.nn as nn

CONFIGS = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


def _features(depth: int, batch_norm: bool, width: float = 1.0) -> tuple[list[nn.Module], int]:
    if depth not in CONFIGS:
        raise ValueError(f"VGG depth must be one of {sorted(CONFIGS)}, got {depth}")
    layers, cin = [], 3
    for v in CONFIGS[depth]:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
            continue
        cout = max(1, round(v * width))
        layers.append(nn.Conv2d(cin, cout, 3, padding=1, bias=not batch_norm))
        if batch_norm:
            layers.append(nn.BatchNorm2d(cout))
        layers.append(nn.ReLU(inplace=True))
        cin = cout
    return layers, cin


def _init(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return model


def cifar_vgg(depth: int = 16, num_classes: int = 10, width: float = 1.0) -> nn.Sequential:
    features, cout = _features(depth, batch_norm=True, width=width)
    return _init(nn.Sequential(*features, nn.Flatten(), nn.Linear(cout, num_classes)))


def imagenet_vgg(depth: int = 16, num_classes: int = 1000, batch_norm: bool = False,
                 dropout: float = 0.5) -> nn.Sequential:
    features, cout = _features(depth, batch_norm)
    return _init(nn.Sequential(
        *features, nn.AdaptiveAvgPool2d(7), nn.Flatten(),
        nn.Linear(cout * 49, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
        nn.Linear(4096, num_classes),
    ))
