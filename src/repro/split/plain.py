"""CIFAR networks without early exits, as :class:`~repro.split.exits.ExitNet` with one exit (the
network's own classifier), so the profiler, the latency model and the exit trainer take them as they
take the exit nets: a split point between any two backbone layers, the classifier tail (pooling,
flatten, linear) the one head.

- ``resnet``: a CIFAR ResNet of ``depth`` = 6n+2 (:func:`repro.models.resnet.cifar_resnet`), each
  residual block one layer.
- ``vgg``: the CIFAR VGG with BatchNorm (:func:`repro.models.vgg.cifar_vgg`), each conv, BN, ReLU and
  pool one layer; the head is flatten + linear on the 1x1x512 map.
- ``densenet``: a CIFAR DenseNet-BC (Huang et al.; 3x3 stem of 2 x growth channels, three dense blocks
  with bottlenecks, transitions compressing by half), each dense block and transition one layer
  (:mod:`repro.models.densenet`'s blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn as nn

from repro.models.densenet import dense_stages
from repro.models.resnet import cifar_resnet
from repro.models.vgg import cifar_vgg
from repro.split.exits import ExitNet


def _tail(layers: list[nn.Module], tail: int, name: str) -> ExitNet:
    return ExitNet(layers[:-tail], [nn.Sequential(*layers[-tail:])], [len(layers) - tail], name)


def resnet(depth: int = 20, width: int = 16, num_classes: int = 10) -> ExitNet:
    return _tail(list(cifar_resnet(depth, num_classes, width).children()), 3, "resnet")


def vgg(depth: int = 16, width: float = 1.0, num_classes: int = 10) -> ExitNet:
    return _tail(list(cifar_vgg(depth, num_classes, width).children()), 2, "vgg")


def densenet(growth: int = 12, blocks: Sequence[int] = (16, 16, 16), bn_size: int = 4, compression: float = 0.5,
             num_classes: int = 10) -> ExitNet:
    """DenseNet-BC for 32x32 inputs; the defaults are DenseNet-BC-100 (k = 12)."""
    stages, c = dense_stages(2 * growth, growth, blocks, bn_size, compression)
    layers = [nn.Conv2d(3, 2 * growth, 3, padding=1, bias=False), *stages, nn.BatchNorm2d(c), nn.ReLU(inplace=True),
              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes)]
    return _tail(layers, 3, "densenet")


def build(name: str, **kw) -> ExitNet:
    builders = {"resnet": resnet, "vgg": vgg, "densenet": densenet}
    if name not in builders:
        raise ValueError(f"unknown network {name!r}; known: {', '.join(builders)}")
    return builders[name](**kw)
