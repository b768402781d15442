"""Standard CIFAR augmentation (random 32x32 crop of the image zero-padded by 4, random horizontal
flip) done on the training device as a few tensor ops over a whole batch. Variants (airbench94's):
another pad, reflect instead of zero padding (``pad_mode``), and alternating flips (``flip``:
each image's flip drawn once per run, then all of them mirrored every other epoch, so an image is
seen both ways in every two epochs).

All randomness of an epoch (the shuffle, every crop offset and flip) is drawn up front on the CPU
from a generator seeded by (seed, epoch): the data an epoch sees does not depend on the device,
the execution mode (eager, compiled, CUDA graph) or on whether the run was resumed, and no RNG
state is needed to resume mid-training.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

PAD = 4
PLAN_FIELDS = ("index", "dy", "dx", "flip")
FLIPS = ("random", "alternate")
PAD_MODES = ("zeros", "reflect")


def epoch_plan(n: int, batch_size: int, seed: int, epoch: int, augment: bool = True, pad: int = PAD,
               flip: str = "random") -> torch.Tensor:
    """(steps, batch_size, 4) int64 on the CPU: image index, crop offsets dy, dx in [0, 2*pad], flip.

    flip: "random" (each image, each epoch, a coin) or "alternate" (a coin per image drawn once from
    ``seed``, inverted in odd epochs). The last incomplete batch is dropped (every step has the same
    shape, which CUDA graphs and torch.compile need).
    """
    steps = n // batch_size
    if steps == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {n} training images")
    flip_mode = flip
    if flip not in FLIPS:
        raise ValueError(f"flip must be one of {FLIPS}, got {flip!r}")
    if pad < 0:
        raise ValueError(f"crop pad must be >= 0, got {pad}")
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
    index = torch.randperm(n, generator=gen)[: steps * batch_size].view(steps, batch_size)
    if augment:
        offsets = torch.randint(0, 2 * pad + 1, (2, steps, batch_size), generator=gen)
        flip = torch.randint(0, 2, (steps, batch_size), generator=gen)
        if flip_mode == "alternate":
            once = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 2**31]).generate_state(1)[0]))
            flip = torch.randint(0, 2, (n,), generator=once)[index] ^ (epoch % 2)
    else:
        offsets = torch.full((2, steps, batch_size), pad)
        flip = torch.zeros(steps, batch_size, dtype=torch.int64)
    return torch.stack([index, offsets[0], offsets[1], flip], dim=-1)


def channel_stats(images: np.ndarray, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of uint8 NHWC images, in [0, 1] units (float64 accumulation)."""
    total = np.zeros(3)
    total_sq = np.zeros(3)
    for start in range(0, len(images), chunk):
        block = images[start:start + chunk].reshape(-1, 3).astype(np.float64) / 255.0
        total += block.sum(0)
        total_sq += (block ** 2).sum(0)
    count = len(images) * images.shape[1] * images.shape[2]
    mean = total / count
    return mean.tolist(), np.sqrt(total_sq / count - mean ** 2).tolist()


class DeviceAugment:
    """Turns uint8 NHWC images into normalised float NCHW batches on ``device``."""

    def __init__(self, mean, std, height: int, width: int, device, channels_last: bool = True, pad: int = PAD,
                 pad_mode: str = "zeros"):
        if pad_mode not in PAD_MODES:
            raise ValueError(f"pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
        if pad_mode == "reflect" and pad >= min(height, width):
            raise ValueError(f"reflect padding needs pad < the image size, got pad {pad} for {height}x{width}")
        self.pad_mode = pad_mode
        self.device = torch.device(device)
        # x * scale + shift == (x / 255 - mean) / std, as one fused multiply-add
        self.scale = (1.0 / (255.0 * torch.tensor(std, device=self.device))).view(1, 3, 1, 1)
        self.shift = (-torch.tensor(mean, device=self.device) / torch.tensor(std, device=self.device)).view(1, 3, 1, 1)
        self.height, self.width = height, width
        self.channels_last = channels_last
        self.pad = pad
        self._grids: dict = {}  # (device, batch size) -> index tensors, made once

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, C) -> float (B, C, H, W). The NHWC data viewed as NCHW is already
        channels-last in memory, so channels-last costs nothing here."""
        x = torch.addcmul(self.shift, images.to(self.device, non_blocking=True).permute(0, 3, 1, 2).float(), self.scale)
        return x if self.channels_last else x.contiguous()

    def crop_flip(self, images: torch.Tensor, plan_step: torch.Tensor) -> torch.Tensor:
        """Gather batch ``plan_step`` (B, 4) from ``images`` (N, H, W, C) with its crops and flips:
        one pad and one gather over the batch instead of per-image Python work."""
        index, dy, dx, flip = plan_step.to(images.device, non_blocking=True).unbind(-1)
        samples, rows, cols, cols_flipped = self._grid(images.device, len(index))
        p = self.pad
        if self.pad_mode == "reflect":  # index the unpadded image with mirrored coordinates: no pad copy
            rows = _reflect(dy[:, None] - p + rows, self.height)[:, :, None]
            cols = _reflect(dx[:, None] - p + torch.where(flip[:, None].bool(), cols_flipped, cols), self.width)
            return images[index[:, None, None], rows, cols[:, None, :]]
        padded = F.pad(images[index], (0, 0, p, p, p, p))  # zeros, like torchvision's RandomCrop(32, padding=4)
        rows = (dy[:, None] + rows)[:, :, None]
        cols = (dx[:, None] + torch.where(flip[:, None].bool(), cols_flipped, cols))[:, None, :]
        return padded[samples, rows, cols]

    def _grid(self, device: torch.device, batch: int):
        key = (device, batch)
        if key not in self._grids:
            cols = torch.arange(self.width, device=device)
            self._grids[key] = (torch.arange(batch, device=device)[:, None, None],
                                torch.arange(self.height, device=device), cols, cols.flip(0))
        return self._grids[key]

    def __call__(self, images: torch.Tensor, plan_step: torch.Tensor) -> torch.Tensor:
        return self.normalize(self.crop_flip(images, plan_step))


def _reflect(i: torch.Tensor, size: int) -> torch.Tensor:
    """Coordinates in [-size+1, 2*size-2] mirrored into [0, size) without repeating the edge (like
    F.pad's "reflect")."""
    i = i.abs()
    return torch.where(i > size - 1, 2 * (size - 1) - i, i)


def first_batch(split, size: int, device, channels_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``size`` images of a prepared split, normalised with the split's own channel
    statistics and not augmented, with their labels, on ``device``: the fixed batch that probes and
    calibrations (memory probes, a regulariser's coefficient) measure on."""
    mean, std = channel_stats(split.images)
    augment = DeviceAugment(mean, std, split.images.shape[1], split.images.shape[2], device, channels_last=channels_last)
    x = augment.normalize(torch.from_numpy(split.images[:size]))
    return x, torch.from_numpy(split.labels[:size]).to(device)
