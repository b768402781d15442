"""Model zoo: ``build_model(name, num_classes, **kw)`` over a registry of our own implementations.

CIFAR models (32x32 input, 10 classes by default): resnet20/32/44/56/110 (option A shortcuts),
cifar_resnet (any 6n+2 depth), clicktrain_resnet32 (the ClickTrain artifact's wide "resnet32":
64-512 channels, [3, 4, 5, 3] basic blocks, 20.1M parameters), vgg11/13/16/19 (with BatchNorm), airbench94 (Keller Jordan's fast
CIFAR-10 net; its whitening layer needs ``init_whitening(images)`` before training).
ImageNet-style models (224x224, 1000 classes): resnet18/34/50/101/152, bottleneck_resnet (any
block counts), alexnet (227x227), vgg16_imagenet, vgg19_imagenet, densenet121, vit_b16 (ordinary
modules with their own forward, not Sequentials).
Language model: gpt2_small, a GPT-style decoder stack on token ids (input_size: the context, 1024;
num_classes: the vocabulary, 50257).
Keyword arguments go to the family's builder (e.g. ``width=8`` for a tiny CIFAR ResNet,
``blocks=[6, 8, 12, 6]`` or ``blocks=500`` for bottleneck_resnet).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch.nn as nn

from repro.models.airbench import AirBench, airbench
from repro.models.alexnet import alexnet
from repro.models.densenet import densenet
from repro.models.transformer import gpt_decoder, vit
from repro.models.resnet import bottleneck_resnet, cifar_resnet, clicktrain_resnet32, imagenet_resnet, stage_blocks
from repro.models.vgg import cifar_vgg, imagenet_vgg


@dataclass(frozen=True)
class ModelEntry:
    builder: Callable[..., nn.Module]
    input_size: int  # height = width of the input images
    num_classes: int  # default number of classes
    tokens: bool = False  # a language model: input (batch, input_size) token ids below num_classes


def _registry() -> dict[str, ModelEntry]:
    reg = {"cifar_resnet": ModelEntry(cifar_resnet, 32, 10), "airbench94": ModelEntry(airbench, 32, 10),
           "clicktrain_resnet32": ModelEntry(clicktrain_resnet32, 32, 10)}
    for depth in (20, 32, 44, 56, 110):
        reg[f"resnet{depth}"] = ModelEntry(partial(cifar_resnet, depth), 32, 10)
    for depth in (11, 13, 16, 19):
        reg[f"vgg{depth}"] = ModelEntry(partial(cifar_vgg, depth), 32, 10)
    for depth, blocks in ((18, [2, 2, 2, 2]), (34, [3, 4, 6, 3])):
        reg[f"resnet{depth}"] = ModelEntry(partial(imagenet_resnet, blocks, "basic"), 224, 1000)
    for depth, blocks in ((50, [3, 4, 6, 3]), (101, [3, 4, 23, 3]), (152, [3, 8, 36, 3])):
        reg[f"resnet{depth}"] = ModelEntry(partial(bottleneck_resnet, blocks), 224, 1000)
    reg["bottleneck_resnet"] = ModelEntry(bottleneck_resnet, 224, 1000)
    reg["alexnet"] = ModelEntry(alexnet, 227, 1000)
    for depth in (16, 19):
        reg[f"vgg{depth}_imagenet"] = ModelEntry(partial(imagenet_vgg, depth), 224, 1000)
    reg["densenet121"] = ModelEntry(densenet, 224, 1000)
    reg["vit_b16"] = ModelEntry(vit, 224, 1000)
    reg["gpt2_small"] = ModelEntry(gpt_decoder, 1024, 50257, tokens=True)  # input_size: the context
    return reg


MODELS = _registry()


def build_model(name: str, num_classes: int | None = None, **kw) -> nn.Module:
    """Build registered model ``name``; ``num_classes`` None means the family's default (10 or 1000)."""
    entry = get_entry(name)
    return entry.builder(num_classes=entry.num_classes if num_classes is None else num_classes, **kw)


def get_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODELS", "ModelEntry", "build_model", "get_entry", "count_params", "cifar_resnet", "clicktrain_resnet32", "cifar_vgg",
           "imagenet_resnet", "bottleneck_resnet", "stage_blocks", "imagenet_vgg", "alexnet",
           "densenet", "vit", "gpt_decoder", "airbench", "AirBench"]
