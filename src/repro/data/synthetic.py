"""Synthetic data: ImageNet-shaped batches for memory and speed experiments (no real data
needed), and small CIFAR-shaped splits for tests.

Generated on the target device directly (no host-to-device copy), deterministic from a seed: the
same seed on the same device type gives the same tensors. A small pool of distinct batches is
made once and cycled, so generating data costs nothing inside a timed loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from repro.data.arrays import Split

IMAGENET_CLASSES = 1000
IMAGENET_SIZE = 224


def synthetic_batch(batch_size: int, *, image_size: int = IMAGENET_SIZE, num_classes: int = IMAGENET_CLASSES,
                    seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    channels_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch: images (N, 3, S, S) ~ N(0, 1) (what a normalised image looks like) and int64 labels."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(batch_size, 3, image_size, image_size, generator=gen, device=device, dtype=dtype)
    y = torch.randint(0, num_classes, (batch_size,), generator=gen, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


@dataclass
class SyntheticImageNet:
    """Iterable of ``steps`` batches cycling over ``pool`` distinct batches made up front."""

    batch_size: int
    steps: int
    pool: int = 2
    image_size: int = IMAGENET_SIZE
    num_classes: int = IMAGENET_CLASSES
    seed: int = 0
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    channels_last: bool = False

    def __post_init__(self):
        self._batches = [
            synthetic_batch(self.batch_size, image_size=self.image_size, num_classes=self.num_classes,
                            seed=self.seed + i, device=self.device, dtype=self.dtype,
                            channels_last=self.channels_last)
            for i in range(self.pool)
        ]

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for i in range(self.steps):
            yield self._batches[i % self.pool]


def synthetic_split(n: int, num_classes: int = 10, image_size: int = 32, seed: int = 0) -> Split:
    """A CIFAR-shaped uint8 split whose classes differ in mean colour (the same colours for every
    seed; the seed picks the noise): learnable in a few steps, for tests and speed runs that need
    no real data."""
    labels = np.arange(n, dtype=np.int64) % num_classes
    colours = np.random.default_rng(0).integers(40, 216, size=(num_classes, 3))  # fixed: splits agree
    noise = np.random.default_rng(seed).normal(0, 20, size=(n, image_size, image_size, 3))
    images = np.clip(colours[labels][:, None, None, :] + noise, 0, 255).astype(np.uint8)
    return Split(images, labels, tuple(f"class{i}" for i in range(num_classes)), f"synthetic (seed {seed})")
