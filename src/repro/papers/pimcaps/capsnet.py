"""CapsNet with dynamic routing (Sabour, Frosst and Hinton, NeurIPS 2017), for inference.

conv1 (9x9, stride 1, ReLU) -> primary capsules (9x9, stride 2, ``types`` capsule types of
``primary_dim`` each, squashed) -> class capsules by routing-by-agreement over ``iterations``:
  u_hat[b, l, h] = W[l, h] u[b, l]                 (prediction vectors: the large intermediate)
  repeat: c = softmax_h(logits); s[b, h] = sum_l c u_hat; v = squash(s); logits += u_hat . v
The routing procedure (what PIM-CapsNet moves into memory) is the prediction step and the
iterations; the conv part is conv1 and the primary capsules.

Configurations: ``mnist`` is the paper's MNIST network (28x28x1, 256 conv1 channels, 32 types of
8D primary capsules = 1152 capsules, 10 16D class capsules); ``cifar`` (32x32x3, 64 types: 4096
capsules, 11 classes with none-of-the-above) and ``svhn`` (32x32x3, 64 conv1 channels, 16 types of
6D capsules: 1024, 10 8D class capsules) follow the changes Sabour et al. describe for CIFAR-10 and
SVHN, at the full image size. Weights are random: timing needs shapes, not training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class CapsConfig:
    name: str
    in_channels: int
    image: int
    conv_channels: int = 256
    types: int = 32          # primary capsule types
    primary_dim: int = 8
    classes: int = 10
    class_dim: int = 16
    iterations: int = 3

    @property
    def grid(self) -> int:
        return (self.image - 8 - 9) // 2 + 1

    @property
    def low_capsules(self) -> int:
        return self.types * self.grid * self.grid


CONFIGS = {
    "mnist": CapsConfig("mnist", 1, 28),
    "cifar": CapsConfig("cifar", 3, 32, types=64, classes=11),
    "svhn": CapsConfig("svhn", 3, 32, conv_channels=64, types=16, primary_dim=6, class_dim=8),
}


def squash(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    n2 = (s * s).sum(dim, keepdim=True)
    return s * (n2 / (1 + n2) / torch.sqrt(n2 + 1e-9))


def predictions(u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """u_hat (B, L, H, D) from u (B, L, d) and W (L, H, D, d): one batched matmul over the L capsules."""
    lo, h, d_out, d_in = weight.shape
    flat = torch.bmm(u.transpose(0, 1), weight.reshape(lo, h * d_out, d_in).transpose(1, 2))  # (L, B, H*D)
    return flat.transpose(0, 1).contiguous().view(u.shape[0], lo, h, d_out)  # materialised, as on the GPU


def dynamic_routing(u_hat: torch.Tensor, iterations: int) -> torch.Tensor:
    """Class capsules v (B, H, D) by routing-by-agreement."""
    logits = torch.zeros(u_hat.shape[:3], device=u_hat.device, dtype=u_hat.dtype)
    for r in range(iterations):
        c = F.softmax(logits, dim=2)
        v = squash((c.unsqueeze(-1) * u_hat).sum(1))
        if r < iterations - 1:
            logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
    return v


def routing_procedure(u: torch.Tensor, weight: torch.Tensor, iterations: int) -> torch.Tensor:
    """The routing procedure as PIM-CapsNet counts it: the prediction vectors and the iterations."""
    return dynamic_routing(predictions(u, weight), iterations)


class CapsNet(nn.Module):
    def __init__(self, cfg: CapsConfig):
        super().__init__()
        self.cfg = cfg
        self.conv1 = nn.Conv2d(cfg.in_channels, cfg.conv_channels, 9)
        self.primary = nn.Conv2d(cfg.conv_channels, cfg.types * cfg.primary_dim, 9, stride=2)
        self.weight = nn.Parameter(0.05 * torch.randn(cfg.low_capsules, cfg.classes, cfg.class_dim, cfg.primary_dim))

    def conv_part(self, x: torch.Tensor) -> torch.Tensor:
        """Primary capsules u (B, L, d): conv1, the primary conv, squash."""
        p = self.primary(F.relu(self.conv1(x)))
        b, _, g, _ = p.shape
        u = p.view(b, self.cfg.types, self.cfg.primary_dim, g, g).permute(0, 1, 3, 4, 2)
        return squash(u.reshape(b, -1, self.cfg.primary_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return routing_procedure(self.conv_part(x), self.weight, self.cfg.iterations)
