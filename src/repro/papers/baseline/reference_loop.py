"""The plain PyTorch training loop our trainer is compared with in ``trainer_bench``.

What a tutorial-style CIFAR script does: a DataLoader over a TensorDataset on the CPU, per-image
crop and flip on the CPU (in worker processes), a pinned host-to-device copy of every batch, and
an eager fp32 model with torch.optim.SGD. It never calls ``loss.item()`` per step, so the
comparison does not charge it for host syncs a careful user would avoid.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from repro.train.augment import PAD


class AugmentCollate:
    """Batch per-image random crop (zero pad 4) + horizontal flip + normalisation, on the CPU."""

    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)

    def __call__(self, samples):
        images, labels = [], []
        for image, label in samples:  # image: uint8 (C, H, W)
            h, w = image.shape[1:]
            dy, dx = torch.randint(0, 2 * PAD + 1, (2,)).tolist()
            image = F.pad(image, (PAD, PAD, PAD, PAD))[:, dy:dy + h, dx:dx + w]
            if torch.rand(()) < 0.5:
                image = image.flip(2)
            images.append((image.float() / 255.0 - self.mean) / self.std)
            labels.append(label)
        return torch.stack(images), torch.stack(labels)


def reference_epochs(model: nn.Module, images: np.ndarray, labels: np.ndarray, mean, std, *, device, epochs: int,
                     batch_size: int, lr: float, momentum: float, weight_decay: float, workers: int,
                     seed: int = 0) -> list[float]:
    """Train ``epochs`` epochs the plain way; returns each epoch's seconds."""
    dev = torch.device(device)
    model.to(dev).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    dataset = TensorDataset(torch.from_numpy(images).permute(0, 3, 1, 2), torch.from_numpy(labels))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers,
                        collate_fn=AugmentCollate(mean, std), pin_memory=dev.type == "cuda",
                        persistent_workers=workers > 0, generator=torch.Generator().manual_seed(seed))
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for _ in range(epochs):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for x, y in loader:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
    return times
